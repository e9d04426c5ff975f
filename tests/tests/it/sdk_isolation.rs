//! The official Python SDK against the emulator's sandbox boundary (a root filesystem the
//! sandbox may write, and boots of its own): `tests/sdk/isolation.py` writes as root
//! outside the template's paths, uses `sudo` as `user`, and checks that the boot id and
//! uptime belong to the sandbox and that a reboot renews them while files stay. Needs root (namespaces) and `sudo` on the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sdk_support;

use sdk_support::{install_py, run_script};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_sees_a_writable_root_and_its_own_boots() {
    let py_path = install_py().await;
    let emu = run_script(
        "python3",
        "isolation.py",
        ("PYTHONPATH", &py_path),
        "SMOKE OK",
    )
    .await;
    emu.shutdown().await;
}

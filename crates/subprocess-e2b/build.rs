//! Builds the native spawn helper (`helper/spawn_helper.rs`, a `no_std` Linux x86_64
//! program) with `rustc` alone and embeds it (`native_spawn_helper` cfg). Where that
//! target cannot be built here (another host without the x86_64 Linux `core`, no linker),
//! the crate builds without it and every spawn uses the `sh` helper; set
//! `EXEC_WORLD_NO_NATIVE_HELPER=1` to build without it on purpose.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=helper");
    println!("cargo::rerun-if-changed=../exec-world-sys/src/env_scrub_list.rs");
    println!("cargo::rerun-if-env-changed=EXEC_WORLD_NO_NATIVE_HELPER");
    println!("cargo::rustc-check-cfg=cfg(native_spawn_helper)");
    if std::env::var_os("EXEC_WORLD_NO_NATIVE_HELPER").is_some_and(|v| v != "0") {
        return;
    }
    let (Some(out), Some(rustc)) = (std::env::var_os("OUT_DIR"), std::env::var_os("RUSTC")) else {
        return;
    };
    let exe = PathBuf::from(out).join("spawn-helper");
    let result = Command::new(rustc)
        .args([
            "--edition=2024",
            "--crate-type=bin",
            "--crate-name=spawn_helper",
            "--target=x86_64-unknown-linux-gnu",
            "-Copt-level=s",
            "-Cpanic=abort",
            "-Cstrip=symbols",
            "-Ccodegen-units=1",
            "-Crelocation-model=static",
            "-Clink-arg=-nostartfiles",
            "-Clink-arg=-nostdlib",
            "-Clink-arg=-static",
            "-o",
        ])
        .arg(&exe)
        .arg("helper/spawn_helper.rs")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output();
    match result {
        Ok(o) if o.status.success() && exe.is_file() => {
            println!("cargo::rustc-cfg=native_spawn_helper");
        }
        Ok(o) => println!(
            "cargo::warning=native spawn helper not built (spawns use the sh helper): {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("rustc failed")
        ),
        Err(e) => println!("cargo::warning=native spawn helper not built: {e}"),
    }
}

//! `e2bx shell` in a real PTY (exec-world's PTY helper in the test, e2bx as the session
//! leader on the slave side): the remote bash answers typed input, a local resize reaches
//! the remote PTY, `exit` ends e2bx with the shell's status, and the terminal settings are
//! restored.

use crate::support;

use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A PTY pair from exec-world-sys's helper, the master as a `File` for plain reads and writes.
struct Pty {
    master: std::fs::File,
    slave: OwnedFd,
}

fn openpty(cols: u16, rows: u16) -> Pty {
    let pty = exec_world_sys::pty::open(cols, rows).expect("openpty");
    Pty {
        master: pty.master.into(),
        slave: pty.slave,
    }
}

fn termios(fd: &OwnedFd) -> libc::termios {
    // SAFETY: zeroed termios is a valid out-buffer; fd is open.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) }, 0);
    t
}

/// Collects what the PTY master reads, on a thread.
struct Screen {
    rx: mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Screen {
    fn new(mut master: std::fs::File) -> Screen {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Screen {
            rx,
            seen: Vec::new(),
        }
    }

    /// Wait (bounded) until `pred` holds for everything seen since the last `clear`.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) {
        for _ in 0..600 {
            if pred(&String::from_utf8_lossy(&self.seen)) {
                return;
            }
            if let Ok(b) = self.rx.recv_timeout(Duration::from_millis(100)) {
                self.seen.extend_from_slice(&b);
            }
        }
        panic!(
            "never saw {what}; screen: {:?}",
            String::from_utf8_lossy(&self.seen)
        );
    }

    fn clear(&mut self) {
        self.seen.clear();
    }
}

#[test]
fn interactive_shell_in_a_pty() {
    let pty = openpty(100, 30);
    let before = termios(&pty.slave);
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup slave"));
    let mut cmd = Command::new(support::bin());
    for k in [
        "E2B_API_KEY",
        "E2B_API_URL",
        "E2B_DOMAIN",
        "E2B_SANDBOX_URL",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("TERM", "xterm")
        .args(["--quiet", "shell"])
        .stdin(dup(&pty.slave))
        .stdout(dup(&pty.slave))
        .stderr(dup(&pty.slave));
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        cmd.pre_exec(exec_world_sys::pty::make_controlling_terminal);
    }
    let mut child = cmd.spawn().expect("spawn e2bx shell");
    let mut writer = pty.master.try_clone().expect("dup master");
    let mut screen = Screen::new(pty.master);

    // Wait for the remote prompt, then compute something only bash can.
    screen.wait_for("a prompt", |s| s.contains("$ ") || s.contains("# "));
    writer.write_all(b"echo $((6*7))\n").expect("type");
    screen.wait_for("42", |s| s.contains("42"));

    // Resize locally: SIGWINCH reaches e2bx, which resizes the remote PTY.
    exec_world_sys::pty::set_size(&writer, 123, 41).expect("resize");
    let mut resized = false;
    for _ in 0..20 {
        screen.clear();
        writer.write_all(b"stty size\n").expect("type");
        screen.wait_for("stty output", |s| s.matches('\n').count() >= 2);
        if String::from_utf8_lossy(&screen.seen).contains("41 123") {
            resized = true;
            break;
        }
    }
    assert!(resized, "remote PTY never got 41x123");

    writer.write_all(b"exit\n").expect("type");
    let status = (0..600)
        .find_map(|_| match child.try_wait().expect("try_wait") {
            Some(s) => Some(s),
            None => {
                std::thread::sleep(Duration::from_millis(100));
                None
            }
        })
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!("e2bx shell did not exit");
        });
    assert_eq!(status.code(), Some(0));
    let after = termios(&pty.slave);
    assert_eq!(before.c_lflag, after.c_lflag, "local modes restored");
    assert_eq!(before.c_iflag, after.c_iflag, "input modes restored");
    assert_eq!(before.c_oflag, after.c_oflag, "output modes restored");
    assert_eq!(before.c_cc, after.c_cc, "control chars restored");
}

#[test]
fn shell_without_a_terminal_is_one_line_error() {
    let o = Command::new(support::bin())
        .env_remove("E2B_API_KEY")
        .env_remove("E2B_API_URL")
        .env_remove("E2B_SANDBOX_URL")
        .env_remove("E2B_DOMAIN")
        .args(["-q", "shell"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
}

//! Child processes of a test: free ports, waiting for a listener, log
//! files, signals, and a handle that kills its process when dropped. The
//! servers of this crate are built on these, and so are tests that start
//! processes of their own (a worker, an exporter, Prometheus).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("no free port")
}

/// Waits until something listens on `port`; panics if `child` exits first.
pub fn wait_for_port(port: u16, what: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status} before listening on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port} within 20 s");
}

/// A log file under the temp dir's `fleet-test-logs/`, named for this test
/// process so parallel test binaries do not overwrite each other.
pub fn log_file(name: &str) -> std::fs::File {
    let dir = std::env::temp_dir().join("fleet-test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    std::fs::File::create(dir.join(format!("{name}-{}.log", std::process::id()))).expect("log file")
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

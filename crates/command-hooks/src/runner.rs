//! Running one hook command: `sh -c`, JSON on stdin, stdout and stderr captured (bounded),
//! and the whole process group killed at the deadline.

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The most of stdout or stderr kept; the rest is read and dropped.
const MAX_OUTPUT: usize = 1024 * 1024;

/// How a hook command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
    /// It was still running at its deadline, and was killed.
    TimedOut,
    /// It could not be started.
    CouldNotRun(String),
}

/// Kills the process group unless the hook finished: a hook abandoned with its call (the
/// call was cancelled) does not keep running.
struct Running {
    child: Box<dyn ChildWrapper>,
    finished: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.child.start_kill();
        }
    }
}

async fn read_capped(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Runs `command` with `sh -c` in `cwd` (also `CLAUDE_PROJECT_DIR`), writes `input` to its
/// stdin, and waits at most `timeout`.
pub(crate) async fn run(command: &str, cwd: &Path, input: &[u8], timeout: Duration) -> Ran {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env("CLAUDE_PROJECT_DIR", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut wrapped = CommandWrap::from(cmd);
    // Its own group, so that the deadline also kills what the script started.
    wrapped.wrap(ProcessGroup::leader());
    let child = match wrapped.spawn() {
        Ok(c) => c,
        Err(e) => return Ran::CouldNotRun(format!("cannot run `sh -c`: {e}")),
    };
    let mut running = Running {
        child,
        finished: false,
    };
    let stdin = running.child.stdin().take();
    let stdout = running.child.stdout().take();
    let stderr = running.child.stderr().take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its input is fine: a broken pipe is ignored.
            let _ = stdin.write_all(input).await;
            let _ = stdin.shutdown().await;
        }
    };
    let outcome = tokio::time::timeout(timeout, async {
        let ((), stdout, stderr) = tokio::join!(write, read_capped(stdout), read_capped(stderr));
        let status = running.child.wait().await;
        (status, stdout, stderr)
    })
    .await;
    match outcome {
        Ok((Ok(status), stdout, stderr)) => {
            running.finished = true;
            Ran::Exited {
                code: status.code(),
                stdout,
                stderr,
            }
        }
        Ok((Err(e), _, _)) => Ran::CouldNotRun(format!("waiting for it failed: {e}")),
        Err(_) => {
            let _ = running.child.start_kill();
            running.finished = true;
            let _ = tokio::time::timeout(Duration::from_secs(1), running.child.wait()).await;
            Ran::TimedOut
        }
    }
}

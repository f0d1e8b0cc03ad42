//! Just enough WebDriver to drive headless Chromium from a test: chromedriver started on a
//! loopback port by the test itself (`scripts/browser.sh` installs Debian's packages when they
//! are missing and says where they are), spoken to as JSON over plain HTTP/1.1.
//!
//! A test that cannot get a browser fails: it never skips.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One browser at a time per test program: two Chromiums on two cores only slow each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What `scripts/browser.sh` reports.
struct Installed {
    chromium: String,
    chromedriver: String,
    no_sandbox: bool,
}

fn installed() -> Installed {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/browser.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed: no browser for the page tests",
        script.display()
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    Installed {
        chromium: get("chromium").expect("browser.sh names chromium"),
        chromedriver: get("chromedriver").expect("browser.sh names chromedriver"),
        no_sandbox: get("no_sandbox").is_some(),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A headless Chromium session; ends (and stops chromedriver) when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _turn: MutexGuard<'static, ()>,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a 1400×1000 window.
    pub fn start() -> Browser {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let found = installed();
        let port = free_port();
        let driver = Command::new(&found.chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", found.chromedriver));
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _turn: turn,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(status) = browser.request("GET", "/status", None)
                && status["value"]["ready"] == json!(true)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not start in 20 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut args = vec![
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            "--hide-scrollbars",
        ];
        if found.no_sandbox {
            // As root Chromium refuses to start with its sandbox.
            args.push("--no-sandbox");
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": found.chromium, "args": args},
        }}});
        let answer = browser
            .request("POST", "/session", Some(caps))
            .expect("a WebDriver session");
        browser.session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_string();
        browser
    }

    /// One WebDriver request; the answer's JSON, or the error it carried.
    fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .map_err(|e| e.to_string())?;
        // chromedriver may keep the connection open: read the head, then exactly the body.
        let mut raw = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        let head_end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("no HTTP answer".into());
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        let chunked = head.contains("transfer-encoding: chunked");
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        loop {
            let have = raw.len() - head_end;
            let done = match length {
                Some(n) => have >= n,
                None if chunked => raw.ends_with(b"0\r\n\r\n"),
                None => false,
            };
            if done {
                break;
            }
            let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&buf[..n]);
        }
        let body = String::from_utf8_lossy(&raw[head_end..]).to_string();
        let body = if chunked { unchunk(&body) } else { body };
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if value["value"].get("error").is_some() {
            return Err(value["value"].to_string());
        }
        Ok(value)
    }

    fn session_request(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.request(method, &path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))["value"]
            .clone()
    }

    /// Opens a file in the browser.
    pub fn open_file(&self, file: &Path) {
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        self.session_request("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.session_request(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Waits until `script` returns true (at most 30 s).
    pub fn wait_for(&self, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.eval(script, vec![]) != json!(true) {
            assert!(Instant::now() < deadline, "timed out waiting for: {script}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The WebDriver id of the first element `css` matches.
    pub fn find(&self, css: &str) -> String {
        let v = self.session_request(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    /// Clicks an element, as a user would.
    pub fn click(&self, element: &str) {
        self.session_request(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Types into an element (its keys, as a user would).
    pub fn type_into(&self, element: &str, text: &str) {
        self.session_request(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Performs input actions (keys, pointer) and releases them.
    pub fn actions(&self, actions: Value) {
        self.session_request("POST", "/actions", Some(json!({ "actions": actions })));
        self.session_request("DELETE", "/actions", None);
    }

    /// The page as a PNG.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let b64 = self.session_request("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn unchunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Where the tests leave what a person may want to look at: `target/view-tests/`.
pub fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/view-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

//! The network by policy: a command with `net(…)` rules reaches allowed hosts through dsh's
//! proxy (curl over plain HTTP, over CONNECT to a TLS server, through SOCKS5; git over HTTP
//! and over ssh through `GIT_SSH_COMMAND`; pip from a local index), and nothing else: denied
//! hosts, IP literals, names resolving to loopback, Host and SNI mismatches are refused and
//! recorded in `meta.egress`; direct connects, UDP and DNS, unset proxy variables, SOCKS5 to
//! a denied host and a relay inside the sandbox gain nothing. Servers listen on 127.0.0.2
//! only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::net_rules::{NetClass, NetRules};
use dsh_net::{HostsFile, NetProxy};
use dsh_tool_shell::SandboxConfig;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// `openssl s_server` on 127.0.0.2 with a certificate for `pkg.test`; killed on drop.
struct TlsServer {
    child: Child,
    port: u16,
    cert: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_server() -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=pkg.test",
        ])
        .args(["-addext", "subjectAltName=DNS:pkg.test"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl is needed for the TLS server");
    assert!(made.success());
    let port = {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new("openssl")
        .args(["s_server", "-www", "-accept"])
        .arg(format!("127.0.0.2:{port}"))
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for it to listen.
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.2", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    TlsServer {
        child,
        port,
        cert,
        _dir: dir,
    }
}

/// An HTTP server on 127.0.0.2, one request per connection: `answer(PATH)` gives the
/// content type and body of a `200`, or `None` for a `404`.
fn http_on_loopback(
    answer: impl Fn(&str) -> Option<(&'static str, Vec<u8>)> + Send + Sync + 'static,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                match answer(&path) {
                    Some((kind, body)) => {
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(&body);
                    }
                    None => {
                        let _ = write!(
                            s,
                            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                    }
                }
            });
        }
    });
    port
}

/// The file under `root` a request's path names, a folder's `index.html` for the folder
/// (git's "dumb" HTTP protocol and a PEP 503 "simple" index need no more).
fn file_at(root: &std::path::Path, path: &str) -> Option<(&'static str, Vec<u8>)> {
    let path = path
        .split('?')
        .next()
        .unwrap_or("/")
        .trim_start_matches('/');
    if path.contains("..") {
        return None;
    }
    let mut file = root.join(path);
    if file.is_dir() {
        file = file.join("index.html");
    }
    let body = std::fs::read(&file).ok()?;
    let kind = if file.extension().is_some_and(|e| e == "html") {
        "text/html"
    } else {
        "application/octet-stream"
    };
    Some((kind, body))
}

/// Each test's world: an HTTP server on 127.0.0.2 (`port`), and a shell whose proxy allows
/// `allow` and resolves through the hosts file `hosts`.
struct Fixture {
    env: Env,
    port: u16,
}

impl Fixture {
    /// Every request gets `hello from PATH`.
    fn hello(allow: &[&str], hosts: &str) -> Fixture {
        let port = http_on_loopback(|path| {
            Some(("text/plain", format!("hello from {path}\n").into_bytes()))
        });
        Fixture {
            env: env_with(allow, &[], Some(hosts)),
            port,
        }
    }

    /// The files under `root`.
    fn files(root: std::path::PathBuf, allow: &[&str], hosts: &str) -> Fixture {
        let port = http_on_loopback(move |path| file_at(&root, path));
        Fixture {
            env: env_with(allow, &[], Some(hosts)),
            port,
        }
    }
}

fn env_with(allow: &[&str], deny: &[&str], hosts: Option<&str>) -> Env {
    let rules = NetRules::new(allow, &[], deny, NetClass::Deny).unwrap();
    let proxy = NetProxy::new(rules, hosts.map(|h| HostsFile::parse(h).unwrap()));
    Env::new(SandboxConfig::workspace_write().with_proxy(proxy))
}

const HOSTS: &str = "127.0.0.2 pkg.test other.test\n";

fn egress(v: &Value) -> Vec<Value> {
    v["meta"]["egress"].as_array().cloned().unwrap_or_default()
}

fn decisions(v: &Value) -> Vec<(String, String)> {
    egress(v)
        .iter()
        .map(|e| {
            (
                e["host"].as_str().unwrap_or("").to_string(),
                e["decision"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_allowed_host_works_over_http_connect_and_socks5() {
    let Fixture { env, port } = Fixture::hello(&["net(pkg.test)"], HOSTS);
    let tls = tls_server();
    let v = env
        .ok(&format!(
            "curl -sS --max-time 20 http://pkg.test:{port}/plain && \
             curl -sS --max-time 20 --cacert {} https://pkg.test:{}/ | head -c 9 && echo && \
             curl -sS --max-time 20 --socks5-hostname 127.0.0.1:3128 http://pkg.test:{port}/socks",
            tls.cert.display(),
            tls.port
        ))
        .await;
    assert_eq!(code(&v), 0, "{v}");
    let out = stdout(&v);
    assert!(out.contains("hello from /plain"), "{v}");
    assert!(
        out.contains("<HTML>"),
        "the TLS server answered through CONNECT: {v}"
    );
    assert!(out.contains("hello from /socks"), "{v}");
    let e = egress(&v);
    let via: Vec<&str> = e.iter().map(|r| r["via"].as_str().unwrap()).collect();
    assert_eq!(via, ["HTTP", "CONNECT", "SOCKS5"], "{v}");
    for r in &e {
        assert_eq!(r["decision"], "allow", "{v}");
        assert_eq!(r["rule"], "net(pkg.test)", "{v}");
        assert!(r["bytesDown"].as_u64().unwrap() > 0, "{v}");
    }
    assert_eq!(v["meta"]["networkProxy"], true);
}

#[tokio::test]
async fn denied_hosts_literals_loopback_names_and_mismatches_are_refused() {
    let Fixture { env, port } = Fixture::hello(&["net(pkg.test)"], HOSTS);
    let tls = tls_server();
    let cases = [
        (
            "denied host",
            format!("curl -sS --max-time 20 -f http://other.test:{port}/"),
            "other.test",
        ),
        (
            "ip literal",
            format!("curl -sS --max-time 20 -f http://127.0.0.2:{port}/"),
            "127.0.0.2",
        ),
        (
            "host mismatch",
            format!(
                "curl -sS --max-time 20 -f -H 'Host: other.test:{port}' http://pkg.test:{port}/"
            ),
            "pkg.test",
        ),
        (
            "sni mismatch",
            format!(
                "echo | openssl s_client -proxy 127.0.0.1:3128 -connect pkg.test:{} -servername other.test -CAfile {} 2>&1; exit 1",
                tls.port,
                tls.cert.display()
            ),
            "pkg.test",
        ),
    ];
    for (what, command, host) in cases {
        let v = env.ok(&command).await;
        assert_ne!(code(&v), 0, "{what}: `{command}` got through: {v}");
        let d = decisions(&v);
        assert!(
            d.contains(&(host.to_string(), "deny".to_string())),
            "{what}: {v}"
        );
        assert!(d.iter().all(|(_, dec)| dec == "deny"), "{what}: {v}");
        assert!(
            v["meta"]["egressRefused"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{what}: {v}"
        );
    }
    // A name that resolves to loopback (the system resolver) needs a rule naming the address.
    let env = env_with(&["net(localhost)"], &[], None);
    let v = env
        .ok(&format!(
            "curl -sS --max-time 20 -f http://localhost:{port}/"
        ))
        .await;
    assert_ne!(code(&v), 0, "{v}");
    let reason = egress(&v)[0]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("loopback"), "{v}");
}

#[tokio::test]
async fn walking_around_the_proxy_gains_nothing() {
    let Fixture { env, port } = Fixture::hello(&["net(pkg.test)"], HOSTS);
    let relay = "perl -MIO::Socket::INET -e '$l=IO::Socket::INET->new(LocalAddr=>\"127.0.0.1:8888\",Listen=>5,ReuseAddr=>1) or die; \
        if(!fork){while($c=$l->accept){$u=IO::Socket::INET->new(\"127.0.0.1:3128\") or die; \
        if(!fork){while(sysread($c,$b,65536)){syswrite($u,$b)} exit} while(sysread($u,$b,65536)){syswrite($c,$b)} close $c} exit}' ; sleep 0.3";
    let attempts = [
        (
            "direct connect",
            format!("echo hi > /dev/tcp/127.0.0.2/{port}"),
        ),
        (
            "direct curl",
            format!("curl -sS --max-time 10 -f --noproxy '*' http://127.0.0.2:{port}/"),
        ),
        (
            "unset proxy variables",
            format!(
                "env -u http_proxy -u HTTP_PROXY -u ALL_PROXY -u all_proxy curl -sS --max-time 10 -f http://pkg.test:{port}/"
            ),
        ),
        ("udp", "echo hi > /dev/udp/127.0.0.2/53".to_string()),
        (
            "dns",
            "perl -MSocket -e 'socket(S, PF_INET, SOCK_DGRAM, 0) or die \"$!\"'".to_string(),
        ),
        ("getent", "getent hosts pkg.test".to_string()),
        (
            "socks5 to a denied host",
            format!(
                "curl -sS --max-time 10 -f --socks5-hostname 127.0.0.1:3128 http://other.test:{port}/"
            ),
        ),
        (
            "relay inside",
            format!(
                "{relay}; curl -sS --max-time 10 -f -x http://127.0.0.1:8888 http://other.test:{port}/"
            ),
        ),
        (
            "icmp",
            "perl -MSocket -e 'socket(S, PF_INET, SOCK_DGRAM, 1) or die \"$!\"'".to_string(),
        ),
    ];
    for (what, command) in attempts {
        let v = env.ok(&command).await;
        assert_ne!(code(&v), 0, "{what}: `{command}` got through: {v}");
        assert!(
            decisions(&v).iter().all(|(_, d)| d == "deny"),
            "{what}: an attempt was allowed: {v}"
        );
        if what == "socks5 to a denied host" || what == "relay inside" {
            assert_eq!(
                decisions(&v),
                [("other.test".to_string(), "deny".to_string())],
                "{what}: {v}"
            );
        }
    }
}

#[tokio::test]
async fn git_clones_over_http_through_the_proxy() {
    let served = tempfile::tempdir().unwrap();
    let src = served.path().join("src");
    let git = |args: &[&str], dir: &std::path::Path| {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "git {args:?}");
    };
    std::fs::create_dir_all(&src).unwrap();
    git(&["init", "-q"], &src);
    std::fs::write(src.join("hello.txt"), "cloned through dsh\n").unwrap();
    git(&["add", "."], &src);
    git(&["commit", "-q", "-m", "one"], &src);
    git(&["clone", "-q", "--bare", "src", "repo.git"], served.path());
    git(&["update-server-info"], &served.path().join("repo.git"));
    let Fixture { env, port } = Fixture::files(
        served.path().to_path_buf(),
        &["net(git.test)"],
        "127.0.0.2 git.test other.test\n",
    );
    let v = env
        .ok(&format!(
            "git clone -q http://git.test:{port}/repo.git clone && cat clone/hello.txt"
        ))
        .await;
    assert_eq!(code(&v), 0, "{v}");
    assert_eq!(stdout(&v), "cloned through dsh\n", "{v}");
    assert!(
        decisions(&v)
            .iter()
            .all(|(h, d)| h == "git.test" && d == "allow"),
        "{v}"
    );
    // The same repository under a name no rule allows.
    let v = env
        .ok(&format!(
            "git clone -q http://other.test:{port}/repo.git clone2"
        ))
        .await;
    assert_ne!(code(&v), 0, "{v}");
    assert_eq!(
        decisions(&v),
        [("other.test".to_string(), "deny".to_string())],
        "{v}"
    );
}

/// A stand-in for sshd on 127.0.0.2: says its banner, and sends the first line each client
/// says (an ssh client's own banner) down the channel.
fn ssh_banner_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(b"SSH-2.0-dshtest\r\n");
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                while line.len() < 256 && !line.ends_with(b"\n") {
                    match s.read(&mut byte) {
                        Ok(1) => line.push(byte[0]),
                        _ => break,
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&line).trim().to_string());
            });
        }
    });
    (port, rx)
}

/// git over ssh: dsh sets `GIT_SSH_COMMAND` to ssh with a proxy command through the proxy,
/// so `git ls-remote ssh://…` reaches an allowed host (the server hears ssh's banner) as a
/// judged `CONNECT`, and a host no rule allows is refused, with the proxy's reason on the
/// command's stderr and in `meta.egress`, and never reached.
#[tokio::test]
async fn git_over_ssh_goes_through_the_proxy() {
    let (port, heard) = ssh_banner_server();
    let env = env_with(
        &["net(ssh.test)"],
        &[],
        Some("127.0.0.2 ssh.test other.test\n"),
    );
    let v = env
        .ok(&format!(
            "git ls-remote ssh://git@ssh.test:{port}/repo.git; \
             echo \"GIT_SSH_COMMAND=$GIT_SSH_COMMAND\""
        ))
        .await;
    let banner = heard
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the ssh server heard nothing: {v}"));
    assert!(banner.starts_with("SSH-2.0-"), "{banner}: {v}");
    assert!(stdout(&v).contains("ProxyCommand"), "{v}");
    let e = egress(&v);
    assert_eq!(e.len(), 1, "{v}");
    assert_eq!(e[0]["host"], "ssh.test", "{v}");
    assert_eq!(e[0]["port"], port, "{v}");
    assert_eq!(e[0]["via"], "CONNECT", "{v}");
    assert_eq!(e[0]["decision"], "allow", "{v}");
    assert!(e[0]["bytesUp"].as_u64().unwrap() > 0, "{v}");
    assert!(e[0]["bytesDown"].as_u64().unwrap() > 0, "{v}");

    let v = env
        .ok(&format!(
            "git ls-remote ssh://git@other.test:{port}/repo.git"
        ))
        .await;
    assert_ne!(code(&v), 0, "{v}");
    assert!(
        stderr(&v).contains("dsh: the network proxy refused other.test:")
            && stderr(&v).contains("no rule allows other.test"),
        "the command is told why: {v}"
    );
    assert_eq!(
        decisions(&v),
        [("other.test".to_string(), "deny".to_string())],
        "{v}"
    );
    assert!(
        heard
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_err(),
        "the denied host was reached: {v}"
    );
}

/// A Python with pip: the one `scripts/mcp-sdks.sh` installs for the SDK tests (it fails,
/// naming why, when it cannot).
fn python_with_pip() -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mcp-sdks.sh");
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs scripts/mcp-sdks.sh");
    assert!(
        out.status.success(),
        "scripts/mcp-sdks.sh could not install Python with pip"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("python=").map(str::to_string))
        .expect("scripts/mcp-sdks.sh names its python")
}

/// `pip download` from a local "simple" index (PEP 503) whose host a rule allows: the wheel
/// arrives through the proxy (the index page and the file, each a judged plain-HTTP request);
/// the same index under a host no rule allows gives pip nothing but 403s.
#[tokio::test]
async fn pip_downloads_from_an_allowed_index_only() {
    let python = python_with_pip();
    let served = tempfile::tempdir().unwrap();
    let wheel = "tinypkg-1.0-py3-none-any.whl";
    std::fs::create_dir_all(served.path().join("packages")).unwrap();
    std::fs::create_dir_all(served.path().join("simple/tinypkg")).unwrap();
    // A real wheel, small: one module and its metadata.
    let made = Command::new(&python)
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   z.writestr('tinypkg.py', 'VALUE = 42\\n')\n\
             \x20   z.writestr('tinypkg-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: tinypkg\\nVersion: 1.0\\n')\n\
             \x20   z.writestr('tinypkg-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: dsh-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
             \x20   z.writestr('tinypkg-1.0.dist-info/RECORD', '')\n",
        )
        .arg(served.path().join("packages").join(wheel))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        served.path().join("simple/index.html"),
        "<html><body><a href=\"/simple/tinypkg/\">tinypkg</a></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        served.path().join("simple/tinypkg/index.html"),
        format!("<html><body><a href=\"/packages/{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
    let Fixture { env, port } = Fixture::files(
        served.path().to_path_buf(),
        &["net(pypi.test)"],
        "127.0.0.2 pypi.test other.test\n",
    );
    let pip = |host: &str| {
        format!(
            "{python} -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
             --retries 0 --timeout 20 --trusted-host {host} \
             --index-url http://{host}:{port}/simple/ -d dl-{host} tinypkg"
        )
    };
    let v = env
        .ok(&format!("{} && ls dl-pypi.test", pip("pypi.test")))
        .await;
    assert_eq!(code(&v), 0, "{v}");
    assert!(stdout(&v).contains(wheel), "{v}");
    let d = decisions(&v);
    assert!(d.len() >= 2, "the index page and the wheel: {v}");
    assert!(
        d.iter().all(|(h, dec)| h == "pypi.test" && dec == "allow"),
        "{v}"
    );
    assert!(
        egress(&v).iter().all(|e| e["via"] == "HTTP"),
        "pip sends plain-HTTP requests to the proxy: {v}"
    );

    let v = env.ok(&pip("other.test")).await;
    assert_ne!(code(&v), 0, "{v}");
    assert!(
        !env.path("dl").join(wheel).exists() || !stdout(&v).contains("Saved"),
        "{v}"
    );
    let d = decisions(&v);
    assert!(!d.is_empty(), "{v}");
    assert!(
        d.iter().all(|(h, dec)| h == "other.test" && dec == "deny"),
        "{v}"
    );
}

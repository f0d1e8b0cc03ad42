//! A fleet: two `dsh serve --http --store` nodes on one PostgreSQL, behind Debian's nginx
//! (started by `scripts/nginx.sh`), any node serving any named session.
//!
//! - Round-robin: read → edit → shell across requests landing on both nodes; read-before-edit
//!   holds across nodes (an edit without a read is denied whichever node serves it); the steps
//!   are numbered as one session; `dsh check` passes on the exported session.
//! - Hashing on `Dsh-Session`: a session sticks to one node.
//! - kill -9 of a node mid-call: the session continues on the other after the lease; the
//!   killed call is closed (it may have finished); nothing acknowledged is lost.
//! - Two clients racing on one session through different nodes: serialised by the lease, none
//!   lost or duplicated.
//! - A stateless-era `ask` issued on node A and answered through node B: B forwards the
//!   answer to A, whose call waits for it; it runs once, however many times and through
//!   whichever nodes it is sent; with A dead, the answer through B ends with the call as the
//!   log closed it (aborted), never a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::fleet::*;
use common::procs::signal;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// The pause that lets a session go idle on its node (released after 100 ms).
const IDLE: Duration = Duration::from_millis(400);

/// The steps of the log's `tool/call`s, in order.
fn call_steps(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn read_edit_and_shell_across_two_nodes_behind_round_robin_nginx() {
    let port = free_port();
    let fleet = Fleet::behind(2, port);
    let nginx = Nginx::start(port, &fleet.addrs(), Balance::RoundRobin);
    let name = session_name("rr");

    // Without a read, an edit is denied on either node (two requests: round-robin gives one
    // to each).
    for _ in 0..2 {
        let denied = call_retrying(
            &nginx.addr,
            &name,
            "edit_file",
            json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
        );
        assert!(is_error(&denied), "{denied}");
        assert!(text(&denied).contains("has not been read"), "{denied}");
        std::thread::sleep(IDLE);
    }
    let read = call_retrying(
        &nginx.addr,
        &name,
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(!is_error(&read) && text(&read).contains("hello"), "{read}");
    std::thread::sleep(IDLE);
    let edit = call_retrying(
        &nginx.addr,
        &name,
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
    );
    assert!(!is_error(&edit), "{edit}");
    std::thread::sleep(IDLE);
    let shell = call_retrying(
        &nginx.addr,
        &name,
        "shell",
        json!({"command": "cat notes.txt"}),
    );
    assert!(text(&shell).contains("bye"), "{shell}");
    std::thread::sleep(IDLE);
    // Another session never read the file: denied, whichever node serves it.
    let other = session_name("rr-other");
    for _ in 0..2 {
        let denied = call_retrying(
            &nginx.addr,
            &other,
            "edit_file",
            json!({"path": "notes.txt", "old_string": "bye", "new_string": "x"}),
        );
        assert!(text(&denied).contains("has not been read"), "{denied}");
    }
    assert_eq!(
        std::fs::read_to_string(fleet.ws.join("notes.txt")).unwrap(),
        "bye\n"
    );

    let id = session_id(&name);
    let events = fleet.export(&id);
    let ids = call_ids(&events);
    assert_eq!(ids.len(), 5, "{ids:?}");
    let runs: BTreeSet<String> = ids.iter().map(|i| run_of(i)).collect();
    assert_eq!(
        runs.len(),
        2,
        "the calls did not land on both nodes: {ids:?}"
    );
    // One session: its steps run 1, 2, 3, … whichever node took each.
    let steps = call_steps(&events);
    assert_eq!(steps, (1..=5).collect::<Vec<u64>>(), "{steps:?}");
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn hashing_on_the_session_header_keeps_a_session_on_one_node() {
    let port = free_port();
    let fleet = Fleet::behind(2, port);
    let nginx = Nginx::start(port, &fleet.addrs(), Balance::HashOnSession);
    let name = session_name("hash");
    let read = call_retrying(
        &nginx.addr,
        &name,
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(!is_error(&read), "{read}");
    for i in 0..4 {
        std::thread::sleep(IDLE);
        let shell = call_retrying(
            &nginx.addr,
            &name,
            "shell",
            json!({"command": format!("echo {i}")}),
        );
        assert!(!is_error(&shell), "{shell}");
    }
    let id = session_id(&name);
    let ids = call_ids(&fleet.export(&id));
    assert_eq!(ids.len(), 5, "{ids:?}");
    let runs: BTreeSet<String> = ids.iter().map(|i| run_of(i)).collect();
    assert_eq!(runs.len(), 1, "the session moved between nodes: {ids:?}");
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_node_killed_mid_call_leaves_the_session_to_the_other_after_the_lease() {
    let mut fleet = Fleet::start(2);
    let addrs = fleet.addrs();
    let name = session_name("kill");
    let id = session_id(&name);
    let read = call_retrying(&addrs[0], &name, "read_file", json!({"path": "notes.txt"}));
    assert!(!is_error(&read), "{read}");
    let acknowledged = fleet.export(&id);
    assert!(!acknowledged.is_empty());

    // A long call on node 0, which is killed while it runs.
    let first = addrs[0].clone();
    let slow_name = name.clone();
    let slow = std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            call(
                &first,
                &slow_name,
                "shell",
                json!({"command": "sleep 20; echo late > late.txt"}),
                json!({}),
            )
        });
    });
    let started = std::time::Instant::now();
    while fleet.export(&id).len() <= acknowledged.len() {
        assert!(started.elapsed() < Duration::from_secs(30), "no call began");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    signal(fleet.nodes[0].pid(), "-KILL");
    let _ = slow.join();

    // Node 1 takes the session once the lease runs out (retried while busy), closes the
    // killed call, and runs the client's next call; the read made on node 0 still counts.
    let edit = call_retrying(
        &addrs[1],
        &name,
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "after"}),
    );
    assert!(!is_error(&edit), "{edit}");
    let events = fleet.export(&id);
    // Nothing acknowledged is lost.
    assert_eq!(&events[..acknowledged.len()], &acknowledged[..]);
    let ids = call_ids(&events);
    assert_eq!(ids.len(), 3, "{ids:?}");
    let killed = &ids[1];
    let closed = events
        .iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == killed.as_str())
        .unwrap_or_else(|| panic!("the killed call {killed} is not closed: {events:?}"));
    let said = closed["data"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("may have finished"), "{closed}");
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
    drop(fleet.nodes.remove(0));
}

#[test]
fn two_clients_racing_on_one_session_through_two_nodes_are_serialised() {
    let fleet = Fleet::start(2);
    let addrs = fleet.addrs();
    let name = session_name("race");
    let workers: Vec<_> = addrs
        .iter()
        .enumerate()
        .map(|(n, addr)| {
            let (addr, name) = (addr.clone(), name.clone());
            std::thread::spawn(move || {
                for i in 0..8 {
                    let answer = call_retrying(
                        &addr,
                        &name,
                        "shell",
                        json!({"command": format!("echo c{n}-{i} >> race.txt")}),
                    );
                    assert!(!is_error(&answer), "{answer}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let lines: Vec<String> = std::fs::read_to_string(fleet.ws.join("race.txt"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let distinct: BTreeSet<&String> = lines.iter().collect();
    assert_eq!(lines.len(), 16, "{lines:?}");
    assert_eq!(distinct.len(), 16, "{lines:?}");
    let id = session_id(&name);
    let events = fleet.export(&id);
    let ids = call_ids(&events);
    assert_eq!(ids.len(), 16, "{ids:?}");
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 16);
    let results = events.iter().filter(|e| e["type"] == "tool/result").count();
    assert_eq!(results, 16);
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

/// An `ask` of the stateless era made on `addr` for `echo asked >> FILE`: its arguments and
/// the answer (accept) that carries its `requestState`.
fn ask_on(addr: &str, name: &str, file: &str) -> (Value, Value) {
    let args = json!({"command": format!("echo asked >> {file}")});
    let asked = call(addr, name, "shell", args.clone(), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().unwrap();
    let answer = json!({
        "requestState": state,
        "inputResponses": {"approval": {"action": "accept"}},
    });
    (args, answer)
}

/// How many times the asked command ran (the lines it appended to `file`).
fn runs(fleet: &Fleet, file: &str) -> usize {
    std::fs::read_to_string(fleet.ws.join(file))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_stateless_ask_answered_through_the_other_node_runs_once() {
    let fleet = Fleet::start(2);
    let addrs = fleet.addrs();
    let name = session_name("ask");
    let (args, answer) = ask_on(&addrs[0], &name, "ask-b.txt");
    assert_eq!(runs(&fleet, "ask-b.txt"), 0);

    // A forged state is refused on the other node as it is anywhere, and runs nothing.
    let mut forged = answer.clone();
    forged["requestState"] = json!(format!("{}0", answer["requestState"].as_str().unwrap()));
    let refused = call(&addrs[1], &name, "shell", args.clone(), forged);
    assert!(refused.get("error").is_some(), "{refused}");
    assert_ne!(refused["error"]["code"], -32002, "{refused}");

    // Through node 1: the state verifies there (the fleet's key), node 1 forwards the answer
    // to node 0, whose call waits for it, and relays the result.
    let done = call(&addrs[1], &name, "shell", args.clone(), answer.clone());
    assert!(!is_error(&done), "{done}");
    assert_eq!(runs(&fleet, "ask-b.txt"), 1);

    // The same answer again, through either node, whether the session is still on node 0
    // or has moved: nothing runs twice.
    for addr in [&addrs[1], &addrs[0], &addrs[1]] {
        let again = call(addr, &name, "shell", args.clone(), answer.clone());
        assert!(again.get("error").is_some(), "{again}");
        assert!(
            again["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("does not wait"),
            "{again}"
        );
        std::thread::sleep(IDLE);
    }
    assert_eq!(runs(&fleet, "ask-b.txt"), 1);

    // One session: one call, one result, step 1; and a next call goes on from there.
    let next = call_retrying(&addrs[1], &name, "shell", json!({"command": "echo next"}));
    assert!(!is_error(&next), "{next}");
    let id = session_id(&name);
    let events = fleet.export(&id);
    assert_eq!(call_ids(&events).len(), 2, "{events:?}");
    assert_eq!(call_steps(&events), vec![1, 2]);
    let results = events.iter().filter(|e| e["type"] == "tool/result").count();
    assert_eq!(results, 2, "{events:?}");
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn the_same_answer_through_both_nodes_at_once_runs_once() {
    let fleet = Fleet::start(2);
    let addrs = fleet.addrs();
    let name = session_name("ask-twice");
    let (args, answer) = ask_on(&addrs[0], &name, "ask-twice.txt");
    let answers: Vec<Value> = addrs
        .iter()
        .map(|addr| {
            let (addr, name, args, answer) =
                (addr.clone(), name.clone(), args.clone(), answer.clone());
            std::thread::spawn(move || call(&addr, &name, "shell", args, answer))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let ran: Vec<&Value> = answers
        .iter()
        .filter(|a| a.get("result").is_some() && !is_error(a))
        .collect();
    assert_eq!(ran.len(), 1, "{answers:?}");
    let refused = answers.iter().filter(|a| a.get("error").is_some()).count();
    assert_eq!(refused, 1, "{answers:?}");
    assert_eq!(runs(&fleet, "ask-twice.txt"), 1);
    let id = session_id(&name);
    let events = fleet.export(&id);
    assert_eq!(call_ids(&events).len(), 1, "{events:?}");
    let results = events.iter().filter(|e| e["type"] == "tool/result").count();
    assert_eq!(results, 1, "{events:?}");
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn an_answer_through_the_other_node_after_the_asking_node_died_ends_clearly() {
    let mut fleet = Fleet::start(2);
    let addrs = fleet.addrs();
    let name = session_name("ask-dead");
    let (args, answer) = ask_on(&addrs[0], &name, "ask-dead.txt");
    signal(fleet.nodes[0].pid(), "-KILL");

    // Node 1 cannot reach node 0: the answer waits for its lease (2 s) to run out, takes
    // the session, and is answered with the call as the log closed it. Never a hang.
    let started = std::time::Instant::now();
    let mut ended = call(&addrs[1], &name, "shell", args.clone(), answer.clone());
    while ended["error"]["code"] == -32002 {
        assert!(started.elapsed() < Duration::from_secs(30), "{ended}");
        ended = call(&addrs[1], &name, "shell", args.clone(), answer.clone());
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(is_error(&ended), "{ended}");
    let said = text(&ended);
    assert!(said.starts_with("ABORTED"), "{ended}");
    assert!(said.contains(&addrs[0]), "{ended}");
    assert!(said.contains("not run by this answer"), "{ended}");
    assert_eq!(runs(&fleet, "ask-dead.txt"), 0);

    // The client asks again, on the node that is left, and its answer runs the call.
    std::thread::sleep(IDLE);
    let (args, answer) = ask_on(&addrs[1], &name, "ask-dead.txt");
    let done = call(&addrs[1], &name, "shell", args, answer);
    assert!(!is_error(&done), "{done}");
    assert_eq!(runs(&fleet, "ask-dead.txt"), 1);
    let id = session_id(&name);
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
    drop(fleet.nodes.remove(0));
}

/// The nginx configuration of docs/src/fleet.md, as it is there, for `nodes` and a listener
/// on `127.0.0.1:PORT` (its two example servers and its `listen` line replaced, nothing else).
fn docs_nginx_config(port: u16, nodes: &[String]) -> String {
    let doc = std::fs::read_to_string(common::serve::repo().join("docs/src/fleet.md")).unwrap();
    let block = doc
        .split("```nginx\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/src/fleet.md shows an nginx configuration");
    let mut config = block.to_string();
    for (shown, actual) in [
        ("server 10.0.0.1:8080 ", format!("server {} ", nodes[0])),
        ("server 10.0.0.2:8080 ", format!("server {} ", nodes[1])),
        ("listen 443 ssl;", format!("listen 127.0.0.1:{port};")),
    ] {
        assert!(config.contains(shown), "the docs' config lost {shown:?}");
        config = config.replace(shown, &actual);
    }
    config
}

/// One request of a 2025-11-25 client (protocol session `session`, no `Dsh-Session`).
fn post_2025(addr: &str, session: Option<&str>, body: &Value) -> common::serve::Reply {
    let mut headers = vec![("MCP-Protocol-Version", "2025-11-25")];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    common::serve::post(addr, &headers, body)
}

#[test]
fn a_2025_client_without_a_dsh_session_sticks_to_one_node_through_the_docs_nginx_config() {
    let port = free_port();
    let fleet = Fleet::behind(2, port);
    let nginx = Nginx::start_with_config(port, &docs_nginx_config(port, &fleet.addrs()));
    // Several protocol sessions: each must find its node on every request after its
    // `initialize` (a node that did not serve it answers 404).
    for client in 0..6 {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-2025", "version": "1"}}});
        let reply = post_2025(&nginx.addr, None, &init);
        assert_eq!(reply.status, 200, "initialize: {}", reply.body);
        let session = reply
            .header("mcp-session-id")
            .expect("an Mcp-Session-Id")
            .to_string();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = post_2025(&nginx.addr, Some(&session), &note);
        assert_eq!(
            reply.status, 202,
            "client {client}, initialized: {}",
            reply.body
        );
        for n in 0..3 {
            let call = json!({"jsonrpc": "2.0", "id": 2 + n, "method": "tools/call",
                "params": {"name": "shell", "arguments": {"command": format!("echo {client}-{n}")}}});
            let reply = post_2025(&nginx.addr, Some(&session), &call);
            assert_eq!(
                reply.status, 200,
                "client {client}, call {n}: {}",
                reply.body
            );
            let answer = reply.message();
            assert!(!is_error(&answer), "client {client}, call {n}: {answer}");
            assert!(text(&answer).contains(&format!("{client}-{n}")), "{answer}");
        }
    }
}

/// The official Python SDK (`mcp`, `Client(mode="2026-07-28")`, installed by
/// `scripts/mcp-sdks.sh`) through round-robin nginx: `tests/sdk/client_fleet.py` reads, edits
/// and runs a shell command in one session across both nodes; another session's edit without a
/// read is refused.
#[test]
fn the_python_sdk_through_round_robin_nginx() {
    let python = common::serve::sdks().python;
    let port = free_port();
    let fleet = Fleet::behind(2, port);
    let nginx = Nginx::start(port, &fleet.addrs(), Balance::RoundRobin);
    let (name, other) = (session_name("py"), session_name("py-other"));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client_fleet.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}/mcp", nginx.addr))
        .arg(&fleet.ws)
        .arg(&name)
        .arg(&other)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the client starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{python} {}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        script.display(),
        out.status
    );
    let id = session_id(&name);
    let events = fleet.export(&id);
    let ids = call_ids(&events);
    assert_eq!(ids.len(), 3, "{ids:?}");
    let runs: BTreeSet<String> = ids.iter().map(|i| run_of(i)).collect();
    assert_eq!(
        runs.len(),
        2,
        "the calls did not land on both nodes: {ids:?}"
    );
    assert_eq!(call_steps(&events), vec![1, 2, 3]);
    let (code, stderr) = fleet.check(&id);
    assert_eq!(code, 0, "{stderr}");
}

/// `--print-plan` of a node says where its sessions live and connects to nothing (the store
/// named here does not exist).
#[test]
fn a_nodes_plan_names_the_shared_store_and_connects_to_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::dsh(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store",
        "postgres://dsh:Sup3rSECRETpw@127.0.0.1:1/none",
        "--workspace",
        dir.path().to_str().unwrap(),
        "--print-plan",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("PostgreSQL store shared by a fleet"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("Sup3rSECRETpw"), "{}", out.stderr);
}

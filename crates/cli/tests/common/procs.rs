//! Processes in tests: signals, a process's descendants, whether one is alive.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

/// Sends `sig` (`-STOP`, `-CONT`, `-KILL`, …) to `pid`.
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
}

/// Every process below `root` (children, their children, …), read from /proc.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(pid, ppid) in &parent_of {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
            }
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// True while `pid` is a process that is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .map(|i| &stat[i + 1..])
            .and_then(|s| s.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Freezes `root` and every process below it (a paused VM or container): answers the frozen
/// descendants.
pub fn freeze_tree(root: u32) -> Vec<u32> {
    signal(root, "-STOP");
    let mut tree = Vec::new();
    for _ in 0..3 {
        for pid in descendants(root) {
            signal(pid, "-STOP");
            if !tree.contains(&pid) {
                tree.push(pid);
            }
        }
    }
    tree
}

/// Resumes a frozen owner (`root` and its `tree`) and asserts that its tools are gone within
/// 3 s: a fenced owner kills them as soon as it runs again.
pub fn resume_and_expect_tools_killed(root: u32, tree: &[u32]) {
    signal(root, "-CONT");
    for &pid in tree {
        signal(pid, "-CONT");
    }
    let resumed = std::time::Instant::now();
    while tree.iter().any(|&pid| alive(pid)) {
        assert!(
            resumed.elapsed() < std::time::Duration::from_secs(3),
            "the old owner's tools still run {:?} after it resumed",
            resumed.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

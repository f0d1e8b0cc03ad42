//! `--print-plan`: what a command line means, on stderr, one thing a line. Paths and rule
//! texts come from the user's files: they are escaped as every note is.

use super::{Logs, Plan};
use crate::cli::{Approve, DurabilityArg, ProfileArg};
use crate::output::printable;
use crate::store::LogTarget;
use dsh_command_hooks::HookEvent;
use dsh_guards::RuleClass;
use dsh_tool_shell::SandboxMode;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Writes the plan of `command` (`run`, `serve`…) on stderr.
pub fn print(plan: &Plan<'_>, command: &str) {
    let text = render(plan, command);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn path(p: &Path) -> String {
    printable(&p.display().to_string()).into_owned()
}

fn class(c: RuleClass) -> &'static str {
    match c {
        RuleClass::Allow => "allow",
        RuleClass::Ask => "ask",
        RuleClass::Deny => "deny",
    }
}

/// The plan as text, one `name  value` line per part; details indented below.
pub(crate) fn render(plan: &Plan<'_>, command: &str) -> String {
    let mut out = format!("dsh {command}: the plan (nothing was started)\n");
    let mut line = |name: &str, value: String| {
        let _ = writeln!(out, "  {name:<10} {value}");
    };
    line("workspace", path(&plan.root));
    line("log", log(plan));
    line("tools", tools(plan));
    line("mcp", mcp(plan));
    line("rules", rules(plan));
    line("hooks", hooks(plan));
    line("sandbox", sandbox(plan));
    line(
        "spill",
        format!("{} (made when a call spills)", path(&plan.spill_dir)),
    );
    if !plan.shell_env.is_empty() {
        line("shell env", plan.shell_env.join(", "));
    }
    line("approval", approval(plan, command));
    line("deadlines", deadlines(plan));
    line(
        "parallel",
        format!("at most {} calls of a step at once", plan.max_parallel),
    );
    let own: Vec<String> = plan.own_files.iter().map(|p| path(p)).collect();
    line("protected", format!("dsh's own files: {}", own.join(", ")));
    out
}

fn log(plan: &Plan<'_>) -> String {
    let durability = match plan.durability {
        DurabilityArg::Always => "fsync each event",
        DurabilityArg::Batch => "fsync in groups",
        DurabilityArg::None => "no fsync",
    };
    match plan.logs {
        Logs::One(LogTarget::File(file)) => format!(
            "{} (created if missing, recovered and continued if present; {durability})",
            path(file)
        ),
        Logs::One(LogTarget::Postgres { session, .. }) => format!(
            "session {} in a PostgreSQL store (under a lease; {durability})",
            printable(session)
        ),
        Logs::Folder(folder) => format!(
            "one log per client session in {} ({durability})",
            path(folder)
        ),
        Logs::Judged => "none: the calls are judged, not run (--dry-run)".into(),
        Logs::Shared(_) => format!(
            "one session per client session in a PostgreSQL store shared by a fleet (under \
             leases; {durability})"
        ),
    }
}

fn tools(plan: &Plan<'_>) -> String {
    let changes = if plan.read_only {
        "; --read-only: every change is denied"
    } else {
        ""
    };
    match plan.profile {
        ProfileArg::Dsh => format!("dsh's: the file tools, run_code, shell{changes}"),
        ProfileArg::ClaudeCode => {
            let names: Vec<&str> = dsh_claude_code::PROFILE.iter().map(|t| t.name).collect();
            format!("Claude Code's: {}{changes}", names.join(", "))
        }
    }
}

fn mcp(plan: &Plan<'_>) -> String {
    let Some(mcp) = &plan.mcp else {
        return "none".into();
    };
    let names: Vec<String> = mcp
        .servers
        .servers()
        .iter()
        .map(|s| printable(&s.name).into_owned())
        .collect();
    let mut text = format!("{}: {}", path(&mcp.file), names.join(", "));
    if !mcp.held_back.is_empty() {
        let held: Vec<String> = mcp
            .held_back
            .iter()
            .map(|n| printable(n).into_owned())
            .collect();
        let _ = write!(
            text,
            " (not started, the policy denies all their tools: {})",
            held.join(", ")
        );
    }
    text
}

fn rules(plan: &Plan<'_>) -> String {
    let Some(rules) = &plan.rules else {
        return "none: every call is allowed (the sandbox and guards still hold)".into();
    };
    let mut sources: Vec<String> = rules.policy.iter().map(|(f, _)| path(f)).collect();
    sources.extend(rules.settings.iter().map(|f| path(f)));
    let merged = &rules.merged;
    let mut text = format!(
        "{}; unmatched calls: {}",
        sources.join(" + "),
        class(merged.default_class())
    );
    for entry in &dsh_claude_code::PROFILE {
        let own = merged.default_for(entry.name);
        if plan.profile == ProfileArg::ClaudeCode && own != merged.default_class() {
            let _ = write!(text, ", {} {}", entry.name, class(own));
        }
    }
    for (c, rule) in merged.rules() {
        let _ = write!(
            text,
            "\n{:13}{:<6} {}",
            "",
            class(c),
            printable(rule.source())
        );
    }
    text
}

fn hooks(plan: &Plan<'_>) -> String {
    let Some(hooks) = &plan.hooks else {
        return "none".into();
    };
    let files: Vec<String> = hooks.files.iter().map(|f| path(f)).collect();
    let mut text = files.join(" + ");
    let settings = hooks.hooks.settings();
    for event in [HookEvent::PreToolUse, HookEvent::PostToolUse] {
        for group in settings.groups(event) {
            for hook in &group.hooks {
                let _ = write!(
                    text,
                    "\n{:13}{} {:?}: {} ({} s{})",
                    "",
                    event.as_str(),
                    printable(&group.matcher_text),
                    printable(&hook.command),
                    hook.timeout.as_secs_f64(),
                    if hook.fail_closed {
                        ", fail closed"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    text
}

fn sandbox(plan: &Plan<'_>) -> String {
    let s = &plan.sandbox;
    let mode = match s.mode {
        SandboxMode::ReadOnly => "read-only (commands write nothing)",
        SandboxMode::WorkspaceWrite => "workspace-write (commands write only the workspace)",
        SandboxMode::Full => "full (NO sandbox)",
    };
    let network = if s.network {
        "network on"
    } else if s.proxy.is_some() && s.mode != SandboxMode::Full {
        "network only through dsh's proxy, by the policy's net(…) rules"
    } else {
        "network off"
    };
    let mut text = format!("{mode}, {network}");
    for (what, paths) in [
        ("read-only", &s.read_only_paths),
        ("hidden", &s.hidden_paths),
    ] {
        for p in paths {
            let _ = write!(text, "\n{:13}{what:<9} {}", "", path(p));
        }
    }
    text
}

fn approval(plan: &Plan<'_>, command: &str) -> String {
    if matches!(plan.logs, Logs::Judged) {
        return "none: an `ask` is reported as such, never put to anyone".into();
    }
    match (plan.approve, command.starts_with("serve")) {
        (Approve::Prompt, true) => "`ask`s are put to the MCP client (elicitation)".into(),
        (Approve::Prompt, false) => "`ask`s are put on the terminal (denied without one)".into(),
        (Approve::Allow, _) => "every `ask` is approved (--approve allow)".into(),
        (Approve::Deny, _) => "every `ask` is denied (--approve deny)".into(),
    }
}

fn deadlines(plan: &Plan<'_>) -> String {
    match plan.timeout_ms {
        Some(ms) => format!("every tool at most {ms} ms (--timeout-ms)"),
        None => format!(
            "each tool its own; {} ms for those without one",
            crate::harness::DEFAULT_TIMEOUT_MS
        ),
    }
}

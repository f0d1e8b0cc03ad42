//! The permission rules of a plan: `--policy` and the Claude Code settings files, one rule
//! engine.

use super::RulesPlan;
use crate::cli::{PipelineOptions, ProfileArg};
use crate::error::CliError;
use dsh_guards::{PermissionRules, Rule, RuleClass};
use std::path::{Path, PathBuf};

/// The Claude Code settings files `--claude-settings` names (`auto`: those of the workspace
/// and the user that exist), in the order they are loaded, with their text.
pub(super) fn read_claude_settings(
    options: &PipelineOptions,
    root: &Path,
) -> Result<Vec<(PathBuf, String)>, CliError> {
    let mut files: Vec<PathBuf> = Vec::new();
    for file in &options.claude_settings {
        if file.as_os_str() == "auto" {
            let project = root.join(".claude");
            let user = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude"));
            for candidate in [
                user.map(|u| u.join("settings.json")),
                Some(project.join("settings.json")),
                Some(project.join("settings.local.json")),
            ]
            .into_iter()
            .flatten()
            {
                if candidate.is_file() && !files.contains(&candidate) {
                    files.push(candidate);
                }
            }
        } else if !files.contains(file) {
            files.push(file.clone());
        }
    }
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::io("read the Claude Code settings", &file, e))?;
            Ok((file, text))
        })
        .collect()
}

/// The rules of the policy file `file`.
pub(crate) fn policy_file(file: &Path) -> Result<PermissionRules, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the policy file", file, e))?;
    PermissionRules::from_toml(&text)
        .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))
}

/// The rules of `--policy` and of the Claude Code settings files, one rule engine; under the
/// claude-code profile each rule naming a profile tool also binds the built-in under it, and
/// unmatched calls of tools that change things are asked about. `None`: no rules at all.
pub(super) fn plan(
    options: &PipelineOptions,
    settings: &[(PathBuf, String)],
    root: &Path,
) -> Result<Option<RulesPlan>, CliError> {
    let policy = match &options.policy {
        Some(file) => Some((file.clone(), policy_file(file)?)),
        None => None,
    };
    let mut rules = policy.as_ref().map(|(_, rules)| rules.clone());
    if !settings.is_empty() {
        add_settings_rules(
            rules.get_or_insert_with(PermissionRules::default),
            settings,
            root,
        )?;
    }
    let Some(mut rules) = rules else {
        return Ok(None);
    };
    if options.profile == ProfileArg::ClaudeCode {
        rules = bind_profile(rules)?;
    }
    Ok(Some(RulesPlan {
        policy,
        settings: settings.iter().map(|(file, _)| file.clone()).collect(),
        merged: rules.with_root(root),
    }))
}

/// The `permissions` of Claude Code settings files, added to `rules`.
fn add_settings_rules(
    rules: &mut PermissionRules,
    settings: &[(PathBuf, String)],
    root: &Path,
) -> Result<(), CliError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut lists = dsh_claude_code::settings::PermissionLists::default();
    for (file, text) in settings {
        let places = dsh_claude_code::settings::Places {
            home: home.as_deref(),
            root: Some(root),
        };
        lists.add_json(text, places).map_err(|e| {
            CliError::Usage(format!("Claude Code settings {}: {e}", file.display()))
        })?;
    }
    // `net(…)` rules (from `WebFetch(domain:…)` and the sandbox's allowed domains) join the
    // policy's network rules.
    let (lists, net) = crate::net::split_settings(lists);
    let merged_net = crate::net::merge_rules(rules, &net)?;
    *rules = std::mem::take(rules).with_net_rules(merged_net);
    for (class, list) in [
        (RuleClass::Allow, &lists.allow),
        (RuleClass::Ask, &lists.ask),
        (RuleClass::Deny, &lists.deny),
    ] {
        for text in list {
            let rule = Rule::parse(text)
                .map_err(|e| CliError::Usage(format!("Claude Code settings: {e}")))?;
            rules.add(class, rule);
        }
    }
    Ok(())
}

/// Under the claude-code profile: each rule naming a profile tool also binds the built-in
/// under it, and (unless the default is deny or ask) unmatched calls of the tools that
/// change things are asked about, as in Claude Code.
fn bind_profile(mut rules: PermissionRules) -> Result<PermissionRules, CliError> {
    let mut aliases = Vec::new();
    for (class, rule) in rules.rules() {
        for entry in &dsh_claude_code::PROFILE {
            if rule.names_tool(entry.name) && !rule.names_tool(entry.builtin) {
                let alias = rule
                    .for_tool(entry.builtin)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                aliases.push((class, alias));
            }
        }
    }
    for (class, alias) in aliases {
        rules.add(class, alias);
    }
    if rules.default_class() == RuleClass::Allow {
        for entry in dsh_claude_code::PROFILE.iter().filter(|t| t.changes_things) {
            rules = rules.with_default_for(entry.name, RuleClass::Ask);
        }
    }
    Ok(rules)
}

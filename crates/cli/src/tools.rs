//! `dsh tools`: the tool list a model request carries, in a provider's shape, for people who
//! wire dsh's tools into a request by hand.

use crate::cli::ToolsArgs;
use crate::error::{CliError, EXIT_OK};
use crate::output::{JsonLines, note};
use dsh_core::ToolRegistry;
use dsh_formats::{check_tool_name, check_tool_schema, render_tools, tool_specs};
use dsh_guards::{KnownTools, PermissionRules};
use dsh_mcp::{McpOptions, McpServers, McpToolSource};
use dsh_tool_fs::FsToolset;
use std::sync::Arc;
use tokio::runtime::Runtime;

/// The tools that change files: left out under `--read-only`.
const WRITERS: [&str; 3] = ["write_file", "edit_file", "apply_patch"];

/// Prints the list: one JSON array, sorted by name. Tools every call of which the policy
/// denies are left out, and so are, under `--read-only`, the tools that could only be denied
/// (the file writers, MCP tools not marked read-only); a tool whose schema the provider would
/// refuse is left out and named on stderr.
pub fn tools(rt: &Runtime, args: &ToolsArgs, out: &mut JsonLines) -> Result<u8, CliError> {
    let format: dsh_formats::Format = args.format.into();
    if args.strict && format != dsh_formats::Format::OpenAi {
        return Err(CliError::Usage(
            "--strict is OpenAI's strict function calling: use it with --format openai".into(),
        ));
    }
    let scratch = tempfile::tempdir()
        .map_err(|e| CliError::Start(format!("a scratch workspace for the tools: {e}")))?;
    let registry = Arc::new(ToolRegistry::new());
    let toolset = rt
        .block_on(FsToolset::builder(scratch.path()).build())
        .map_err(|e| CliError::Start(format!("the file tools: {e}")))?;
    let registered = toolset
        .register(&registry)
        .map_err(|e| CliError::Start(format!("registering the file tools: {e}")))
        .and_then(|()| {
            registry
                .register(dsh_code_mode::RunCode::new(
                    dsh_code_mode::CodeLimits::default(),
                ))
                .map_err(|e| CliError::Start(format!("registering run_code: {e}")))
        })
        .and_then(|()| {
            let shell =
                dsh_tool_shell::ShellTool::new(dsh_tool_shell::ShellConfig::new(scratch.path()))
                    .map_err(|e| CliError::Start(format!("the shell tool: {e}")))?;
            registry
                .register(shell)
                .map_err(|e| CliError::Start(format!("registering shell: {e}")))
        });
    rt.block_on(toolset.shutdown());
    registered?;

    let mut mcp_prefixes = Vec::new();
    let servers = match &args.mcp {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| CliError::io("read the MCP config", file, e))?;
            let servers = McpServers::from_json(&text)
                .map_err(|e| CliError::Usage(format!("MCP config {}: {e}", file.display())))?;
            mcp_prefixes.extend(
                servers
                    .servers()
                    .iter()
                    .map(|s| format!("mcp__{}__", s.name)),
            );
            Some(servers)
        }
        None => None,
    };
    let rules = match &args.policy {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| CliError::io("read the policy file", file, e))?;
            let rules = PermissionRules::from_toml(&text)
                .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))?;
            let known = mcp_prefixes
                .iter()
                .fold(KnownTools::from_registry(&registry), |k, p| {
                    k.with_prefix(p.clone())
                });
            rules
                .check_tools(&known)
                .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))?;
            Some(rules)
        }
        None => None,
    };
    let mcp = match servers {
        Some(mut servers) => {
            if let Some(rules) = &rules {
                servers.retain(|s| {
                    !rules.denies_every_tool_with_prefix(&format!("mcp__{}__", s.name))
                });
            }
            let options = McpOptions {
                read_only: args.read_only,
                ..McpOptions::default()
            };
            let source = rt
                .block_on(McpToolSource::start_with(servers, options))
                .map_err(|e| CliError::Start(e.to_string()))?;
            let registered = source.register(&registry);
            for skipped in source.skipped() {
                note(format!("error: {skipped}"));
            }
            if let Err(e) = registered {
                rt.block_on(source.shutdown());
                return Err(CliError::Start(e.to_string()));
            }
            Some(source)
        }
        None => None,
    };
    let read_only_mcp: Vec<String> = mcp
        .as_ref()
        .map(|m| {
            m.tools()
                .iter()
                .filter(|t| t.is_read_only())
                .map(|t| dsh_core::ToolDefinition::name(t.as_ref()).to_string())
                .collect()
        })
        .unwrap_or_default();
    let specs = tool_specs(&registry, |name| {
        if rules.as_ref().is_some_and(|r| r.denies_every_call(name)) {
            return false;
        }
        if args.read_only {
            if WRITERS.contains(&name) {
                return false;
            }
            if name.starts_with("mcp__") && !read_only_mcp.iter().any(|n| n == name) {
                return false;
            }
        }
        true
    });
    if let Some(source) = &mcp {
        rt.block_on(source.shutdown());
    }
    let specs: Vec<_> = specs
        .into_iter()
        .filter(|spec| {
            match check_tool_name(format, &spec.name)
                .and_then(|()| check_tool_schema(format, &spec.input_schema))
            {
                Ok(()) => true,
                Err(why) => {
                    note(format!("{} left out: {why}", spec.name));
                    false
                }
            }
        })
        .collect();
    let rendered = if args.strict {
        dsh_formats::render_strict_tools(&specs)
    } else {
        render_tools(format, &specs)
    };
    out.print(&[serde_json::Value::Array(rendered)])?;
    Ok(EXIT_OK)
}

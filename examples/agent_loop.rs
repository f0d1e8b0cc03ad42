//! A complete agent loop over dsh, against any OpenAI-compatible chat-completions endpoint.
//!
//! The loop sends the conversation with `stream: true` and the tools dsh renders, reads the
//! server-sent events, and feeds each chunk to [`StreamFeeder`]: every tool call is pushed
//! into an open step the moment its block is complete, so a safe call (a read) runs while the
//! model is still writing later ones. Once the response ends, the step is finished, the
//! step's calls and their frozen results are appended to the conversation as the model will
//! see them, and the loop goes on until the model answers without calling a tool (or
//! `--max-turns` is reached). Its final answer is printed on stdout; everything else goes to
//! stderr.
//!
//! The tools are the built-in file tools (`read_file`, `edit_file`, `write_file`, …) and one
//! typed tool defined here, `word_count`. Every call goes through the pipeline: the workspace
//! sandbox, the `--policy` rules (dsh's TOML permission rules, as `dsh run --policy` reads
//! them), the timeout, and the session log (`--log`, JSON Lines, the format `dsh check` and
//! `dsh replay` read).
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:11434/v1 \
//!   cargo run --example agent_loop -- --model qwen2.5-coder:7b \
//!     --workspace ./ws --log ./ws-session.jsonl [--policy policy.toml] [--max-turns 20] \
//!     "Fix the typo in README.md"
//! ```
//!
//! - Ollama: `ollama serve`, then `OPENAI_BASE_URL=http://127.0.0.1:11434/v1`.
//! - llama.cpp: `llama-server -m model.gguf --jinja --port 8080` (`--jinja` turns on tool
//!   calls), then `OPENAI_BASE_URL=http://127.0.0.1:8080/v1`.
//! - vLLM: `vllm serve MODEL --enable-auto-tool-choice --tool-call-parser hermes` (the parser
//!   that fits the model), then `OPENAI_BASE_URL=http://127.0.0.1:8000/v1`.
//!
//! `OPENAI_API_KEY` is sent as a bearer token when set (local servers need none). The prompt
//! is the arguments after the options, or stdin when there are none.
//!
//! **Plain HTTP only.** The HTTP client is the `reqwest` already in the workspace's lock,
//! built without TLS so that the example adds no crate to it. An `https://` endpoint is
//! refused with a message; to reach one, give the root package's `reqwest` dev-dependency the
//! `rustls` feature (that brings a TLS stack into `Cargo.lock`).
//!
//! **Resuming after a kill.** The log is the record of what the model saw. Started again on
//! the same `--log`, the program recovers the log (a torn last line is cut, calls left in
//! flight are closed as `ABORTED`), rebuilds the conversation by replaying it
//! (`dsh::session::replay` into a transcript, rendered by `dsh::formats::render_transcript`),
//! and continues with the next step number. The log holds tool calls, tool results and the
//! user messages the pipeline defers, not the user's own prompt: so the first prompt is kept
//! beside the log in `<log>.prompt`, written when the log is new and read back on a resume
//! (a prompt given on a resume is ignored). Nor does the log hold the assistant's text: the
//! conversation carries each step's calls with `content: null`, live as on a resume, so
//! both send the model the same messages.
//!
//! **Failures.** An HTTP error status, a response that is not an event stream, or a stream
//! that breaks off (dropped connection, or no data for `--idle-timeout-secs`) ends the program
//! with a message and a non-zero status. The calls whose blocks were complete have run and
//! the step is finished first, so each has its result in the log (a block the break cut
//! short never runs), and a rerun resumes from there. A call
//! of an unknown tool, or with arguments that are not JSON, is not a failure: the pipeline
//! answers it with a structured error result, which the model sees, and the loop goes on.
//!
//! No model can be reached from CI: `tests/agent_loop.rs` runs this program against a small
//! local HTTP server that streams a recorded conversation (`tests/fixtures/agent_loop.json`)
//! in OpenAI's chunk format, and kills and resumes it.
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use async_trait::async_trait;
use dsh::core::typed::{Typed, TypedTool, WorkspacePath};
use dsh::core::{FrozenResult, Hooks, ToolCall, ToolContext, ToolFailure, ToolRegistry};
use dsh::formats::{
    Format, MAX_EVENT_LINE_BYTES, StreamFeeder, render_step, render_tools, render_transcript,
    step_from_run, tool_specs,
};
use dsh::guards::{KnownTools, PermissionRules};
use dsh::scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session};
use dsh::session::{Durability, SessionLog, replay};
use dsh::tool_fs::FsToolset;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "usage: agent_loop --model NAME --workspace DIR --log FILE [--policy FILE] \
[--max-turns N] [--idle-timeout-secs S] [PROMPT...]
  environment: OPENAI_BASE_URL (e.g. http://127.0.0.1:11434/v1), OPENAI_API_KEY (optional)
  the prompt is read from stdin when not given; on a resume it is read from <log>.prompt";

const SYSTEM_PROMPT: &str = "You are a careful coding agent working in a workspace folder. \
Use the tools to read and change files (paths are relative to the workspace). Read a file \
before you edit it. When the task is done, answer in plain text without calling a tool.";

/// How much of an error response's body is shown.
const ERROR_BODY_BYTES: usize = 4096;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    /// The file whose words to count, relative to the workspace.
    path: WorkspacePath,
}

#[derive(Serialize, JsonSchema)]
struct Count {
    /// Whitespace-separated words.
    words: usize,
    /// Lines (a last line without its newline counts).
    lines: usize,
}

/// The typed tool: its schema comes from the Rust types, and its path argument is confined
/// to the workspace before the body runs.
struct WordCount;

#[async_trait]
impl TypedTool for WordCount {
    type Args = CountArgs;
    type Output = Count;

    fn name(&self) -> &str {
        "word_count"
    }

    fn description(&self) -> &str {
        "Counts the words and lines of a text file in the workspace."
    }

    async fn call(&self, args: CountArgs, _ctx: ToolContext) -> Result<Count, ToolFailure> {
        let text = args.path.read_to_string(16 << 20)?;
        Ok(Count {
            words: text.split_whitespace().count(),
            lines: text.lines().count(),
        })
    }

    // Reads only: it may run beside the file tools' reads.
    fn execution_mode(&self) -> dsh::core::ExecutionMode {
        dsh::core::ExecutionMode::Parallel
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
}

struct Config {
    base_url: String,
    api_key: Option<String>,
    model: String,
    workspace: PathBuf,
    log: PathBuf,
    policy: Option<PathBuf>,
    max_turns: usize,
    idle_timeout: Duration,
    prompt: Option<String>,
}

fn parse_args() -> Result<Config, String> {
    let mut args = std::env::args().skip(1);
    let mut model = None;
    let mut workspace = None;
    let mut log = None;
    let mut policy = None;
    let mut max_turns = 20usize;
    let mut idle_secs = 300u64;
    let mut prompt: Vec<String> = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--model" => model = Some(value("--model")?),
            "--workspace" => workspace = Some(PathBuf::from(value("--workspace")?)),
            "--log" => log = Some(PathBuf::from(value("--log")?)),
            "--policy" => policy = Some(PathBuf::from(value("--policy")?)),
            "--max-turns" => {
                max_turns = value("--max-turns")?
                    .parse()
                    .map_err(|e| format!("--max-turns: {e}"))?;
            }
            "--idle-timeout-secs" => {
                idle_secs = value("--idle-timeout-secs")?
                    .parse()
                    .map_err(|e| format!("--idle-timeout-secs: {e}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--" => prompt.extend(args.by_ref()),
            other if other.starts_with("--") => {
                return Err(format!("unknown option {other}\n{USAGE}"));
            }
            _ => prompt.push(arg),
        }
    }
    let base_url = std::env::var("OPENAI_BASE_URL")
        .map_err(|_| format!("OPENAI_BASE_URL is not set\n{USAGE}"))?;
    let missing = |what: &str| format!("{what} is required\n{USAGE}");
    Ok(Config {
        base_url: base_url.trim_end_matches('/').to_string(),
        api_key: std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        model: model.ok_or_else(|| missing("--model"))?,
        workspace: workspace.ok_or_else(|| missing("--workspace"))?,
        log: log.ok_or_else(|| missing("--log"))?,
        policy,
        max_turns,
        idle_timeout: Duration::from_secs(idle_secs.max(1)),
        prompt: (!prompt.is_empty()).then(|| prompt.join(" ")),
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agent_loop: {e}");
            return ExitCode::from(2);
        }
    };
    match run(config).await {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agent_loop: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `<log>.prompt`: the first user prompt, which the log itself does not hold.
fn prompt_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".prompt");
    PathBuf::from(name)
}

async fn run(config: Config) -> Result<String, Error> {
    if config.base_url.starts_with("https://") {
        return Err(
            "this build speaks plain HTTP only; for an https:// endpoint, give the \
                    root package's `reqwest` dev-dependency the `rustls` feature"
                .into(),
        );
    }
    let toolset = FsToolset::builder(&config.workspace)
        .build()
        .await
        .map_err(|e| format!("workspace {}: {e}", config.workspace.display()))?;
    let registry = Arc::new(ToolRegistry::new());
    let registered = toolset
        .register(&registry)
        .and_then(|()| registry.register(Typed::new(WordCount)));
    if let Err(e) = registered {
        toolset.shutdown().await;
        return Err(e.into());
    }
    let rules = match config.policy.as_deref().map(|p| load_policy(p, &registry)) {
        Some(Err(e)) => {
            toolset.shutdown().await;
            return Err(e);
        }
        Some(Ok(rules)) => Some(rules),
        None => None,
    };
    let mut hooks = Hooks::new();
    // The sandbox first: nothing outside the workspace is even put to the rules.
    hooks.pre_execute_arc(toolset.sandbox());
    if let Some(rules) = rules {
        hooks.pre_execute(rules.with_root(toolset.root()));
    }
    let prompt_file = prompt_path(&config.log);
    let mut builder = HarnessBuilder::new(registry.clone())
        .hooks(hooks)
        // The log and the prompt may sit inside the workspace: no tool may rewrite them.
        .protect(&config.log)
        .protect(&prompt_file)
        .owns(toolset.clone());
    if let Some(policy) = &config.policy {
        builder = builder.protect(policy);
    }
    let harness = match builder.build().await {
        Ok(h) => h,
        Err(e) => {
            toolset.shutdown().await;
            return Err(e.into());
        }
    };
    let outcome = converse(&config, &harness, &registry, &toolset, &prompt_file).await;
    // One call stops every session the harness opened (closing its log) and the toolset.
    let report = harness.shutdown_within(Duration::from_secs(5)).await;
    for e in &report.log_errors {
        eprintln!("agent_loop: closing the log: {e}");
    }
    match outcome {
        Ok(answer) if report.log_errors.is_empty() => Ok(answer),
        Ok(_) => Err("the log could not be closed cleanly".into()),
        Err(e) => Err(e),
    }
}

/// The `--policy` file, refused when a rule names no known tool (a typo in a deny rule must
/// not protect nothing), as `dsh run --policy` does.
fn load_policy(path: &Path, registry: &ToolRegistry) -> Result<PermissionRules, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the policy {}: {e}", path.display()))?;
    let rules =
        PermissionRules::from_toml(&text).map_err(|e| format!("policy {}: {e}", path.display()))?;
    rules
        .check_tools(&KnownTools::from_registry(registry))
        .map_err(|e| format!("policy {}: {e}", path.display()))?;
    Ok(rules)
}

/// Opens (or resumes) the session and runs the loop until the model's final answer.
async fn converse(
    config: &Config,
    harness: &Harness,
    registry: &ToolRegistry,
    toolset: &FsToolset,
    prompt_file: &Path,
) -> Result<String, Error> {
    let (log, recovery) = SessionLog::open_file(&config.log, Durability::Batch, None)
        .await
        .map_err(|e| format!("log {}: {e}", config.log.display()))?;
    if recovery.repaired() {
        let mut what = Vec::new();
        if recovery.torn_bytes_cut > 0 {
            what.push(format!(
                "cut a torn tail of {} bytes",
                recovery.torn_bytes_cut
            ));
        }
        if !recovery.closed_calls.is_empty() {
            what.push(format!(
                "closed the call(s) left in flight as ABORTED: {}",
                recovery.closed_calls.join(", ")
            ));
        }
        eprintln!(
            "agent_loop: recovered {}: {}",
            config.log.display(),
            what.join("; ")
        );
        // A write the kill cut short left its temporary file beside its target.
        if let Err(e) = toolset.remove_stale_temp_files().await {
            eprintln!("agent_loop: warning: looking for cut-short writes' temporary files: {e}");
        }
    }
    // Replayed from the log as the writer holds it now (recovered), so the conversation is
    // what the model saw, closed calls' ABORTED results included.
    let events = match log.snapshot().await {
        Ok(events) => events,
        Err(e) => {
            let _ = log.close().await;
            return Err(format!("reading the log back: {e}").into());
        }
    };
    let prompt = match first_prompt(config, prompt_file, !events.is_empty()) {
        Ok(p) => p,
        Err(e) => {
            let _ = log.close().await;
            return Err(e);
        }
    };
    let mut messages = vec![
        json!({"role": "system", "content": SYSTEM_PROMPT}),
        json!({"role": "user", "content": prompt}),
    ];
    let transcript = replay::rebuild(&events);
    messages.extend(render_transcript(Format::OpenAi, &transcript));
    if !events.is_empty() {
        eprintln!(
            "agent_loop: resuming {} ({} events, {} steps) at step {}",
            config.log.display(),
            events.len(),
            transcript.steps.len(),
            recovery.next_step
        );
    }
    let scheduler = SchedulerConfig {
        first_step: recovery.next_step,
        ..SchedulerConfig::default()
    };
    let session = match harness.open(log.clone(), scheduler, None).await {
        Ok(s) => s,
        Err(e) => {
            let _ = log.close().await;
            return Err(e.into());
        }
    };
    let tools = render_tools(Format::OpenAi, &tool_specs(registry, |_| true));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()?;
    for turn in 1..=config.max_turns {
        let request = json!({
            "model": config.model,
            "messages": messages,
            "tools": tools,
            "stream": true,
        });
        match model_turn(config, &client, &session, &request).await? {
            Turn::Answer(text) => return Ok(text),
            Turn::Step(step, rendered) => {
                eprintln!(
                    "agent_loop: turn {turn} ran step {step}: {} messages back",
                    rendered.len()
                );
                messages.extend(rendered);
            }
        }
    }
    Err(format!(
        "no final answer after {} turns (--max-turns); rerun to continue from the log",
        config.max_turns
    )
    .into())
}

/// The prompt of a new log is given (argument or stdin) and kept in `<log>.prompt`; a resumed
/// log's is read back from there.
fn first_prompt(config: &Config, prompt_file: &Path, resuming: bool) -> Result<String, Error> {
    match std::fs::read_to_string(prompt_file) {
        Ok(saved) => {
            if config.prompt.is_some() {
                eprintln!(
                    "agent_loop: resuming with the prompt kept in {}; the one given is ignored",
                    prompt_file.display()
                );
            }
            return Ok(saved);
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("reading {}: {e}", prompt_file.display()).into());
        }
        Err(_) if resuming => {
            return Err(format!(
                "the log {} has events but its prompt file {} is missing",
                config.log.display(),
                prompt_file.display()
            )
            .into());
        }
        Err(_) => {}
    }
    let prompt = match &config.prompt {
        Some(p) => p.clone(),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("reading the prompt from stdin: {e}"))?;
            text
        }
    };
    if prompt.trim().is_empty() {
        return Err(format!("no prompt given\n{USAGE}").into());
    }
    // Written before the first request, so a kill at any later point can resume.
    let partial = prompt_file.with_extension("prompt.tmp");
    std::fs::write(&partial, &prompt)
        .and_then(|()| std::fs::rename(&partial, prompt_file))
        .map_err(|e| format!("writing {}: {e}", prompt_file.display()))?;
    Ok(prompt)
}

enum Turn {
    /// The model answered without calling a tool.
    Answer(String),
    /// The step that ran, and its messages, to append to the conversation.
    Step(u64, Vec<Value>),
}

/// What one streamed response said, besides its tool calls.
#[derive(Default)]
struct Said {
    text: String,
    finish_reason: Option<String>,
    done: bool,
    malformed: usize,
    /// An `{"error": …}` event some servers send inside the stream.
    error: Option<String>,
}

/// One request, its response streamed into an open step, the step finished.
async fn model_turn(
    config: &Config,
    client: &reqwest::Client,
    session: &Session,
    request: &Value,
) -> Result<Turn, Error> {
    let url = format!("{}/chat/completions", config.base_url);
    let mut http = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(serde_json::to_vec(request)?);
    if let Some(key) = &config.api_key {
        http = http.bearer_auth(key);
    }
    let mut response = http.send().await.map_err(|e| format!("POST {url}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let body = read_some(&mut response, config.idle_timeout).await;
        return Err(format!("POST {url}: HTTP {status}: {body}").into());
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !content_type.starts_with("text/event-stream") {
        let body = read_some(&mut response, config.idle_timeout).await;
        return Err(
            format!("POST {url}: expected an event stream, got `{content_type}`: {body}").into(),
        );
    }

    let step = session.open_step()?;
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut said = Said::default();
    let mut broken: Option<String> = None;
    let pushed = {
        let mut feeder = StreamFeeder::new(Format::OpenAi, |call: ToolCall| {
            eprintln!("agent_loop: call {} ({})", call.name, call.call_id);
            calls.push(call.clone());
            step.push(call)
        });
        let mut lines = SseLines::default();
        while !said.done {
            let chunk = match tokio::time::timeout(config.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(bytes))) => bytes,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    broken = Some(format!("the response broke off: {e}"));
                    break;
                }
                Err(_) => {
                    broken = Some(format!(
                        "no data from the model for {} s",
                        config.idle_timeout.as_secs()
                    ));
                    break;
                }
            };
            for data in lines.push(&chunk) {
                said.event(&data, &mut feeder);
                if said.done {
                    break;
                }
            }
        }
        if let Some(error) = &said.error {
            broken = Some(format!("the model server reported an error: {error}"));
        } else if broken.is_none() && !said.done && said.finish_reason.is_none() {
            broken = Some("the response ended before its last event".into());
        }
        said.malformed += lines.overlong;
        if broken.is_some() {
            // A block the break cut short was never complete: it is not run (the feeder is
            // dropped unfinished). The calls already pushed were whole, so they run to their
            // end like any other, and a rerun resumes after them.
            feeder.pushed().len()
        } else {
            feeder.finish().len()
        }
    };
    let outcome = step.finish().await?;
    if said.malformed > 0 {
        eprintln!(
            "agent_loop: warning: {} unreadable event(s) in the response were skipped",
            said.malformed
        );
    }
    if !said.text.is_empty() && pushed > 0 {
        // Not in the log (which holds calls and results), so not sent back either.
        eprintln!("agent_loop: the model said: {}", said.text.trim());
    }
    report_results(&calls, &outcome.results);
    if let Some(why) = broken {
        return Err(format!(
            "{why}; step {} ended with {} result(s) recorded in {}; run the same command again \
             to resume",
            outcome.step,
            outcome.results.len(),
            config.log.display()
        )
        .into());
    }
    if outcome.results.is_empty() {
        if said.finish_reason.as_deref() == Some("length") {
            eprintln!("agent_loop: warning: the answer was cut at the model's length limit");
        }
        return Ok(Turn::Answer(said.text));
    }
    let ran = step_from_run(outcome.step, &calls, &outcome.results, &outcome.deferred);
    Ok(Turn::Step(outcome.step, render_step(Format::OpenAi, &ran)))
}

fn report_results(calls: &[ToolCall], results: &[FrozenResult]) {
    for (call, result) in calls.iter().zip(results) {
        let code = result.code().map_or("ok", |c| c.as_str());
        eprintln!("agent_loop:   {} {} -> {code}", call.name, result.call_id());
    }
}

impl Said {
    fn event<S: dsh::formats::CallSink>(&mut self, data: &str, feeder: &mut StreamFeeder<S>) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let event: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(_) => {
                self.malformed += 1;
                return;
            }
        };
        if let Some(error) = event.get("error") {
            self.error = Some(
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_string),
            );
            self.done = true;
            return;
        }
        let choice = event.get("choices").and_then(|c| c.get(0));
        if let Some(text) = choice
            .and_then(|c| c.get("delta"))
            .and_then(|d| d.get("content"))
            .and_then(Value::as_str)
        {
            self.text.push_str(text);
        }
        if let Some(reason) = choice
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
        {
            self.finish_reason = Some(reason.to_string());
        }
        feeder.push_event(&event);
    }
}

/// The `data:` payloads of a server-sent-event stream, from bytes split anywhere. A line
/// longer than the feeder would keep is skipped (and counted), so memory stays bounded.
#[derive(Default)]
struct SseLines {
    line: Vec<u8>,
    skipping: bool,
    overlong: usize,
}

impl SseLines {
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            if !self.skipping {
                if self.line.len() + body.len() > MAX_EVENT_LINE_BYTES {
                    self.skipping = true;
                    self.overlong += 1;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(body);
                }
            }
            if ends {
                if !self.skipping {
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    // `event:`, `id:`, comments and blank lines carry no payload.
                    if let Some(data) = line.strip_prefix(b"data:") {
                        let data = data.strip_prefix(b" ").unwrap_or(data);
                        out.push(String::from_utf8_lossy(data).into_owned());
                    }
                }
                self.skipping = false;
            }
        }
        out
    }
}

/// The start of an error response's body, for the message.
async fn read_some(response: &mut reqwest::Response, wait: Duration) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_BYTES {
        match tokio::time::timeout(wait, response.chunk()).await {
            Ok(Ok(Some(bytes))) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    body.truncate(ERROR_BODY_BYTES);
    let text = String::from_utf8_lossy(&body).trim().to_string();
    if text.is_empty() {
        "(no body)".into()
    } else {
        text
    }
}

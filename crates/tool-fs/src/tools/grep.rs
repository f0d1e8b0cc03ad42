//! `grep`: a regex search with ripgrep's crates, its ignore rules and its parallel walker.
//!
//! Files are searched in parallel, in whatever order the walker finds them; the output is
//! sorted by path afterwards. In content mode, the lines kept are those of the first files
//! by path, whatever the order of discovery, so a capped output is still stable. Every file
//! is searched even once the output is full, so the totals in the note are stable too.

use super::glob::relative_to;
use super::read_file::cut_line;
use super::walk::{Skips, skip_notes, walk, walk_error};
use super::{GREP, arg, blocking, failure, forbidden_read, permission_subjects, plural};
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Workspace;
use async_trait::async_trait;
use dsh_core::tool::ExecutionMode;
use dsh_core::{ContentBlock, PathPolicies, Signal, ToolContext, ToolDefinition, ToolFailure};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Most lines of context asked for around a match.
const MAX_CONTEXT: u64 = 20;

/// `grep(pattern, path?, glob?, type?, case_insensitive?, output_mode?, context?, before?,
/// after?, multiline?, head_limit?)`.
pub struct Grep {
    shared: Arc<Shared>,
}

impl Grep {
    pub(crate) fn new(shared: Arc<Shared>) -> Grep {
        Grep { shared }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Files,
    Count,
}

impl Mode {
    fn parse(text: Option<&str>) -> Mode {
        match text {
            Some("content") => Mode::Content,
            Some("count") => Mode::Count,
            _ => Mode::Files,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Mode::Content => "content",
            Mode::Files => "files_with_matches",
            Mode::Count => "count",
        }
    }
}

/// One line of content output: its number, whether it matched (or is context), its text;
/// `None` marks a break between non-adjacent groups.
type Line = Option<(u64, bool, String)>;

/// Collects one file's matches, stopping early when there is nothing more to learn.
struct FileSink {
    mode: Mode,
    max_line_chars: usize,
    max_lines: usize,
    matches: u64,
    lines: Vec<Line>,
    /// Stopped at the line cap before the end of the file.
    full: bool,
    /// Stopped at a NUL byte.
    binary: bool,
}

impl FileSink {
    fn push(&mut self, number: Option<u64>, matched: bool, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let (text, _) = cut_line(text, self.max_line_chars);
        self.lines.push(Some((number.unwrap_or(0), matched, text)));
    }

    fn room(&mut self) -> bool {
        self.full = self.lines.len() >= self.max_lines;
        !self.full
    }
}

impl Sink for FileSink {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.matches += 1;
        match self.mode {
            Mode::Files => Ok(false),
            Mode::Count => Ok(true),
            Mode::Content => {
                let first = mat.line_number();
                for (i, line) in mat.lines().enumerate() {
                    self.push(first.map(|n| n + i as u64), true, line);
                }
                Ok(self.room())
            }
        }
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        if self.mode == Mode::Content {
            self.push(ctx.line_number(), false, ctx.bytes());
        }
        Ok(self.room())
    }

    /// Noted; a searcher that quits at a NUL byte quits whatever this answers, and one that
    /// converts it reads on.
    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        if self.mode == Mode::Content {
            self.lines.push(None);
        }
        Ok(true)
    }
}

/// What the search threads gather.
#[derive(Default)]
struct Gathered {
    /// Files and their match counts (files and count modes).
    counts: Vec<(String, u64)>,
    /// Files and their lines (content mode), the first ones by path only.
    lines: BTreeMap<String, Vec<Line>>,
    kept_lines: usize,
    /// Content mode dropped some files' lines to stay under the cap.
    capped: bool,
    files: usize,
    matches: u64,
}

impl Gathered {
    /// Keeps `lines` of `path` if they are among the first `cap` lines by path order.
    fn keep_lines(&mut self, path: String, lines: Vec<Line>, cap: usize) {
        self.kept_lines += lines.len();
        self.lines.insert(path, lines);
        while self.kept_lines > cap && self.lines.len() > 1 {
            if let Some((_, dropped)) = self.lines.pop_last() {
                self.kept_lines -= dropped.len();
                self.capped = true;
            }
        }
    }
}

struct Search<'a> {
    shared: &'a Arc<Shared>,
    policy: &'a PathPolicies,
    ws: &'a Workspace,
    matcher: RegexMatcher,
    mode: Mode,
    before: usize,
    after: usize,
    multiline: bool,
    max_line_chars: usize,
    max_lines: usize,
    signal: &'a Signal,
    gathered: Mutex<Gathered>,
    skips: Arc<Skips>,
}

impl Search<'_> {
    fn gathered(&self) -> std::sync::MutexGuard<'_, Gathered> {
        // A poisoned lock means a panic in another search thread; the data is still whole.
        self.gathered.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn searcher(&self) -> Searcher {
        SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(self.mode == Mode::Content)
            .before_context(self.before)
            .after_context(self.after)
            .multi_line(self.multiline)
            .build()
    }

    /// Whether a file the search stopped at for a NUL byte holds a match anywhere (its NUL
    /// bytes read as line ends), so that it is named instead of passed over in silence.
    fn binary_matches(&self, file: &std::fs::File) -> bool {
        use std::io::{Seek, SeekFrom};
        if (&*file).seek(SeekFrom::Start(0)).is_err() {
            return false;
        }
        let mut sink = FileSink {
            mode: Mode::Files,
            max_line_chars: 0,
            max_lines: 0,
            matches: 0,
            lines: Vec::new(),
            full: false,
            binary: false,
        };
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::convert(b'\x00'))
            .line_number(false)
            .build();
        searcher.search_file(&self.matcher, file, &mut sink).is_ok() && sink.matches > 0
    }

    /// Searches one file found by the walker (`ino`: its inode when the walker listed it).
    fn file(&self, searcher: &mut Searcher, found: &Path, ino: Option<u64>) {
        let Some(rel) = relative_to(self.ws.root(), found) else {
            return;
        };
        // Opened through the workspace's directory handle: a symlink swapped in since the
        // walker listed the directory cannot lead the open outside the root.
        let file = match self.ws.dir().open(&rel) {
            Ok(file) => file.into_std(),
            Err(e) => {
                self.skips.failed(found, Some(&e));
                return;
            }
        };
        // And it must be the file the walker listed and the rules were asked about, not
        // one swapped in under its name since.
        if ino.is_some_and(|ino| file.metadata().map(|m| m.ino()).ok() != Some(ino)) {
            self.skips.failed(found, None);
            return;
        }
        let mut sink = FileSink {
            mode: self.mode,
            max_line_chars: self.max_line_chars,
            max_lines: self.max_lines,
            matches: 0,
            lines: Vec::new(),
            full: false,
            binary: false,
        };
        let searched = searcher.search_file(&self.matcher, &file, &mut sink);
        if sink.binary && self.binary_matches(&file) {
            self.skips.binary(&rel);
        }
        if let Err(e) = searched {
            self.skips.failed(found, Some(&e));
            return;
        }
        if sink.matches == 0 {
            return;
        }
        let mut gathered = self.gathered();
        gathered.files += 1;
        gathered.matches += sink.matches;
        match self.mode {
            Mode::Content => {
                gathered.capped |= sink.full;
                gathered.keep_lines(rel, sink.lines, self.max_lines);
            }
            Mode::Files | Mode::Count => gathered.counts.push((rel, sink.matches)),
        }
    }

    fn run(
        &self,
        base: &Path,
        glob: Option<&str>,
        file_type: Option<&str>,
    ) -> Result<(), ToolFailure> {
        let overrides = match glob {
            Some(glob) => {
                let mut overrides = OverrideBuilder::new(base);
                overrides
                    .add(glob)
                    .map_err(|e| ToolFailure::new(format!("invalid glob `{glob}`: {e}")))?;
                Some(
                    overrides
                        .build()
                        .map_err(|e| ToolFailure::new(format!("invalid glob `{glob}`: {e}")))?,
                )
            }
            None => None,
        };
        let mut walk = walk(
            self.shared,
            GREP,
            self.policy,
            base,
            false,
            overrides,
            &self.skips,
        );
        if walk.base_hidden {
            return Ok(());
        }
        if let Some(name) = file_type {
            walk.builder.types(file_types(name)?);
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(12));
        walk.builder.threads(threads).build_parallel().run(|| {
            let mut searcher = self.searcher();
            Box::new(move |entry| {
                if self.signal.is_cancelled() {
                    return WalkState::Quit;
                }
                match entry {
                    Ok(entry) if entry.file_type().is_some_and(|t| t.is_file()) => {
                        // From a stat, not the directory listing: on overlay file systems a
                        // listing's inode numbers need not be the ones a stat gives.
                        let ino = entry.metadata().ok().map(|m| m.ino());
                        self.file(&mut searcher, entry.path(), ino);
                    }
                    Ok(_) => {}
                    Err(e) => walk_error(&self.skips, &e),
                }
                WalkState::Continue
            })
        });
        if self.signal.is_cancelled() {
            return Err(ToolFailure::new("grep was cancelled"));
        }
        Ok(())
    }
}

/// Only files of one of ripgrep's file types (`rust`, `py`, `js`, …), as `rg --type` does.
fn file_types(name: &str) -> Result<ignore::types::Types, ToolFailure> {
    let mut types = ignore::types::TypesBuilder::new();
    types.add_defaults();
    types.select(name);
    let built = types
        .build()
        .map_err(|e| ToolFailure::new(format!("file type `{name}`: {e}")))?;
    if !types.definitions().iter().any(|d| d.name() == name) {
        return Err(ToolFailure::new(format!(
            "unknown file type `{name}` (ripgrep's names: rust, py, js, ts, go, java, c, cpp, md, …)"
        )));
    }
    Ok(built)
}

/// A non-negative integer argument, capped.
fn count_arg(input: &Value, name: &str, cap: u64) -> Option<usize> {
    input
        .get(name)
        .and_then(Value::as_u64)
        .map(|n| n.min(cap) as usize)
}

fn render(gathered: Gathered, mode: Mode, max_paths: usize) -> (Vec<String>, bool) {
    match mode {
        Mode::Files | Mode::Count => {
            let mut counts = gathered.counts;
            counts.sort();
            let capped = counts.len() > max_paths;
            counts.truncate(max_paths);
            let lines = counts
                .into_iter()
                .map(|(path, n)| match mode {
                    Mode::Count => format!("{path}:{n}"),
                    _ => path,
                })
                .collect();
            (lines, capped)
        }
        Mode::Content => {
            let mut out = Vec::new();
            for (i, (path, lines)) in gathered.lines.into_iter().enumerate() {
                if i > 0 {
                    out.push("--".to_string());
                }
                for line in lines {
                    match line {
                        Some((n, true, text)) => out.push(format!("{path}:{n}:{text}")),
                        Some((n, false, text)) => out.push(format!("{path}-{n}-{text}")),
                        None => out.push("--".to_string()),
                    }
                }
            }
            (out, gathered.capped)
        }
    }
}

fn run(
    shared: &Arc<Shared>,
    input: &Value,
    signal: &Signal,
    policy: &PathPolicies,
) -> Result<Value, ToolFailure> {
    let pattern = arg(input, "pattern").unwrap_or_default();
    let path = arg(input, "path").unwrap_or(".");
    let mode = Mode::parse(arg(input, "output_mode"));
    let case_insensitive = input
        .get("case_insensitive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let context = count_arg(input, "context", MAX_CONTEXT).unwrap_or(0);
    let (before, after) = if mode == Mode::Content {
        (
            count_arg(input, "before", MAX_CONTEXT).unwrap_or(context),
            count_arg(input, "after", MAX_CONTEXT).unwrap_or(context),
        )
    } else {
        (0, 0)
    };
    let multiline = input
        .get("multiline")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let head_limit = count_arg(input, "head_limit", u64::MAX);
    let base = shared.ws.resolve(path).map_err(failure)?;
    forbidden_read(shared, policy, GREP, &base)?;
    let abs_base = shared.ws.root().join(&base);
    if !abs_base.exists() {
        return Err(ToolFailure::new(format!(
            "`{}` does not exist",
            sandbox::display(&base)
        )));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .multi_line(multiline)
        .dot_matches_new_line(multiline)
        .line_terminator((!multiline).then_some(b'\n'))
        .build(pattern)
        .map_err(|e| ToolFailure::new(format!("invalid regex `{pattern}`: {e}")))?;
    let search = Search {
        shared,
        policy,
        ws: &shared.ws,
        matcher,
        mode,
        before,
        after,
        multiline,
        max_line_chars: shared.limits.max_line_chars.min(500),
        max_lines: shared.limits.max_grep_lines,
        signal,
        gathered: Mutex::new(Gathered::default()),
        skips: Arc::default(),
    };
    search.run(&abs_base, arg(input, "glob"), arg(input, "type"))?;
    let gathered = std::mem::take(&mut *search.gathered());
    let (files, matches) = (gathered.files, gathered.matches);
    let (mut lines, mut truncated) = render(gathered, mode, shared.limits.max_paths);
    // `head_limit`: only the first lines (or files) of the output, as `| head -N` would.
    if let Some(limit) = head_limit
        && lines.len() > limit
    {
        lines.truncate(limit);
        truncated = true;
    }
    Ok(json!({
        "pattern": pattern,
        "path": sandbox::display(&base),
        "mode": mode.as_str(),
        "files": files,
        "matches": matches,
        "lines": lines,
        "truncated": truncated,
        "skipped": search.skips.to_json(),
    }))
}

#[async_trait]
impl ToolDefinition for Grep {
    fn name(&self) -> &str {
        GREP
    }

    fn description(&self) -> &str {
        "Searches file contents with a regular expression (Rust regex syntax), like ripgrep: \
         .gitignore'd and hidden files are skipped. `glob` keeps only files matching it \
         (`*.rs`). `output_mode` is `files_with_matches` (default: the paths), `content` \
         (matching lines as path:line:text, with `context` lines around) or `count`."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression."},
                "path": {"type": "string", "description": "A file or directory to search (default: the workspace root)."},
                "glob": {"type": "string", "description": "Only files matching this glob (`*.rs`, `src/**/*.ts`)."},
                "type": {"type": "string", "description": "Only files of this ripgrep file type (`rust`, `py`, `js`)."},
                "case_insensitive": {"type": "boolean"},
                "output_mode": {"enum": ["content", "files_with_matches", "count"]},
                "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT},
                "before": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT, "description": "Lines of context before each match (content mode; default `context`)."},
                "after": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT, "description": "Lines of context after each match (content mode; default `context`)."},
                "multiline": {"type": "boolean", "description": "Let the pattern span lines (`.` matches newlines)."},
                "head_limit": {"type": "integer", "minimum": 0, "description": "Only the first N lines (or files) of the output."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "lines": {"type": "array", "items": {"type": "string"}},
                "files": {"type": "integer"},
                "truncated": {"type": "boolean"}
            },
            "required": ["lines", "files", "truncated"]
        }))
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(120_000)
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        permission_subjects(&self.shared, GREP, input)
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::read("path")]
    }

    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        super::declared(GREP, input)
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["path", "glob", "type", "output_mode", "head_limit"]
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let shared = self.shared.clone();
        blocking(move || run(&shared, &input, &ctx.signal, &ctx.policy)).await
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let pattern = value["pattern"].as_str().unwrap_or("?");
        let path = value["path"].as_str().unwrap_or(".");
        let files = value["files"].as_u64().unwrap_or(0) as usize;
        let matches = value["matches"].as_u64().unwrap_or(0) as usize;
        let notes = skip_notes(value);
        if files == 0 {
            let mut out = format!("No matches for `{pattern}` in `{path}`.");
            for note in notes {
                out.push('\n');
                out.push_str(&note);
            }
            return vec![ContentBlock::text(out)];
        }
        let lines: Vec<&str> = value["lines"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = match value["mode"].as_str() {
            Some("count") => format!(
                "{} in {}\n",
                plural(matches, "matching line"),
                plural(files, "file")
            ),
            Some("content") => String::new(),
            _ => format!("{} match\n", plural(files, "file")),
        };
        out.push_str(&lines.join("\n"));
        if value["truncated"].as_bool() == Some(true) {
            let note = match value["mode"].as_str() {
                Some("content") => format!(
                    "\n[truncated: {} in {} in all; only the first files by path are shown. \
                     Narrow the search with path or glob, or use output_mode files_with_matches]",
                    plural(matches, "matching line"),
                    plural(files, "file")
                ),
                _ => format!(
                    "\n[truncated: showing the first {} of {files} files; narrow the search with path or glob]",
                    lines.len()
                ),
            };
            out.push_str(&note);
        }
        for note in notes {
            out.push('\n');
            out.push_str(&note);
        }
        vec![ContentBlock::text(out)]
    }
}

//! `dsh view`: one self-contained HTML page of a session (a log file or a `--store` session),
//! written to a file or standard output, and opened with the desktop's opener on request.

use crate::error::{CliError, EXIT_OK};
use crate::output::note;
use crate::store::{self, LogTarget};
use dsh_view::PageOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use tokio::runtime::Runtime;

/// Where the page goes, and whether to open it.
pub struct ViewPlan<'a> {
    /// The session.
    pub target: &'a LogTarget,
    /// The page's file; standard output when `None` (and not opening).
    pub output: Option<&'a Path>,
    /// Open the page once written.
    pub open: bool,
}

impl<'a> ViewPlan<'a> {
    /// The plan `dsh view` was given.
    pub fn from_args(target: &'a LogTarget, args: &'a crate::cli::ViewArgs) -> ViewPlan<'a> {
        ViewPlan {
            target,
            output: args.output.as_deref(),
            open: args.open,
        }
    }
}

/// The page of a log file; refuses a file none of whose lines is an event.
pub fn page_of_file(log: &Path) -> Result<String, CliError> {
    let file = std::fs::File::open(log).map_err(|e| CliError::io("read the log", log, e))?;
    let options = PageOptions::new(log.display().to_string());
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    let view = dsh_view::read_view(reader, options.limits).map_err(|e| CliError::log(log, e))?;
    if view.figures.events == 0 && view.bad_lines > 0 {
        return Err(CliError::log(
            log,
            "not a dsh session log: none of its lines is an event",
        ));
    }
    Ok(dsh_view::render_page(&view, &options))
}

/// `dsh view`.
pub fn view(rt: &Runtime, plan: ViewPlan<'_>) -> Result<u8, CliError> {
    let page = match plan.target.file() {
        Some(log) => page_of_file(log)?,
        None => {
            let events = store::read_events(rt, plan.target)?;
            let title = plan.target.label().display().to_string();
            dsh_view::render_events(events, &PageOptions::new(title))
        }
    };
    let output = match (plan.output, plan.open) {
        (Some(path), _) => Some(path.to_path_buf()),
        (None, true) => Some(std::env::temp_dir().join(format!(
            "dsh-view-{}-{}.html",
            std::process::id(),
            dsh_core::event::now_ms()
        ))),
        (None, false) => None,
    };
    let Some(path) = output else {
        let mut out = std::io::stdout().lock();
        out.write_all(page.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| CliError::io("write the page to", Path::new("standard output"), e))?;
        return Ok(EXIT_OK);
    };
    write_page(&path, &page)?;
    note(format!("dsh view: wrote {}", path.display()));
    if plan.open {
        open_page(&path);
    }
    Ok(EXIT_OK)
}

/// Writes the page next to its place and renames it there, so a reader never sees half a page.
pub fn write_page(path: &Path, page: &str) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".dsh-view-")
        .tempfile_in(&dir)
        .map_err(|e| CliError::io("write the page in", &dir, e))?;
    tmp.write_all(page.as_bytes())
        .map_err(|e| CliError::io("write the page", path, e))?;
    tmp.persist(path)
        .map_err(|e| CliError::io("write the page", path, e.error))?;
    Ok(())
}

/// Opens the page with the desktop's opener (`xdg-open`, or `open` on macOS); says so when
/// there is none, without failing: the page is written either way.
fn open_page(path: &Path) {
    let openers: &[&str] = if cfg!(target_os = "macos") {
        &["open"]
    } else {
        &["xdg-open", "gio", "sensible-browser"]
    };
    for opener in openers {
        let mut cmd = std::process::Command::new(opener);
        if *opener == "gio" {
            cmd.arg("open");
        }
        cmd.arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Ok(status) = cmd.status() {
            if status.success() {
                return;
            }
            note(format!(
                "dsh view: {opener} could not open {} ({status})",
                path.display()
            ));
            return;
        }
    }
    note(format!(
        "dsh view: no desktop opener found; open {} in a browser",
        path.display()
    ));
}

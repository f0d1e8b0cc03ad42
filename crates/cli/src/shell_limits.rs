//! `--shell-limits NAME=VALUE,…`: what each `shell` call may consume (issue 28, break 10).
//!
//! Names: `memory`, `processes`, `cpu` (seconds), `file-size`, `open-files`, `tmp`. Sizes take
//! `K`, `M`, `G` (powers of 1024); `none` lifts a limit (not `tmp`, the size of a tmpfs).

use dsh_tool_shell::ShellLimits;

/// One `NAME=VALUE` of `--shell-limits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    name: &'static str,
    value: Option<u64>,
}

/// One `--shell-limits` value: its settings, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings(pub Vec<Setting>);

const NAMES: &[&str] = &[
    "memory",
    "processes",
    "cpu",
    "file-size",
    "open-files",
    "tmp",
];

fn number(name: &str, text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{name}: `{text}` is not a number"))?;
    let scale: u64 = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("{name}: `{text}` has an unknown unit (K, M, G)")),
    };
    let value = n
        .checked_mul(scale)
        .ok_or_else(|| format!("{name}: `{text}` is too large"))?;
    if value == 0 {
        return Err(format!(
            "{name}: 0 would stop every command; `none` lifts a limit"
        ));
    }
    Ok(value)
}

/// Parses one `--shell-limits` value: `NAME=VALUE` pairs separated by commas.
pub fn parse(text: &str) -> Result<Settings, String> {
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not NAME=VALUE"))?;
            let name = NAMES.iter().find(|n| **n == name.trim()).ok_or_else(|| {
                format!(
                    "`{}` is not a limit (one of {})",
                    name.trim(),
                    NAMES.join(", ")
                )
            })?;
            let value = value.trim();
            let value = if value == "none" {
                if *name == "tmp" {
                    return Err("tmp: the temp folder is a tmpfs and needs a size".into());
                }
                None
            } else {
                Some(number(name, value)?)
            };
            Ok(Setting { name, value })
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Settings)
}

/// Applies the settings, in order, over `limits`.
pub fn apply(settings: &[Setting], limits: &mut ShellLimits) {
    for setting in settings {
        let value = setting.value;
        match setting.name {
            "memory" => limits.memory_bytes = value,
            "processes" => limits.processes = value,
            "cpu" => limits.cpu_seconds = value,
            "file-size" => limits.file_size_bytes = value,
            "open-files" => limits.open_files = value,
            _ => limits.tmp_bytes = value.unwrap_or(limits.tmp_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_units_and_none() {
        let mut limits = ShellLimits::default();
        apply(
            &parse("memory=512M,processes=64, cpu=30,file-size=none,tmp=1G")
                .unwrap()
                .0,
            &mut limits,
        );
        assert_eq!(limits.memory_bytes, Some(512 << 20));
        assert_eq!(limits.processes, Some(64));
        assert_eq!(limits.cpu_seconds, Some(30));
        assert_eq!(limits.file_size_bytes, None);
        assert_eq!(limits.tmp_bytes, 1 << 30);
        for bad in [
            "memory",
            "mem=1G",
            "memory=1X",
            "memory=0",
            "tmp=none",
            "cpu=-1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

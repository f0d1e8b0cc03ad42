//! Expansions that can run code the parser never sees as a command.
//!
//! Bash runs code from places that are not command substitutions a parser can follow:
//! arithmetic evaluates array subscripts (`x='a[$(cmd)]'; echo $((x))` runs `cmd`), so do
//! `${a[i]}`, `${x:i}`, `[[ x -eq 1 ]]` and `a[i]=1`; `${x@P}` expands a value as a prompt,
//! command substitutions included; `${!x}` expands a name held in a value; and an operator's
//! word (`${x:-`cmd`}`) is expanded by bash but left as plain text by tree-sitter. A node
//! that may do any of this makes its command an unknown subject: no `allow` rule with a
//! pattern covers it, every `deny` and `ask` rule matches it. What is judged safe is a short
//! list of forms known to run nothing; anything else counts as code.

use tree_sitter::Node;

/// Whether `node` (one node, not its children) may run code the parser does not see.
pub(super) fn runs_hidden_code(node: Node, bytes: &[u8]) -> bool {
    let text = node.utf8_text(bytes).unwrap_or("");
    match node.kind() {
        "expansion" => !plain_expansion(text),
        "arithmetic_expansion" | "c_style_for_statement" | "arithmetic_command" => {
            !constant_arithmetic(text)
        }
        // `((x))` is read as a compound statement by tree-sitter-bash.
        "compound_statement" => text.starts_with("((") && !constant_arithmetic(text),
        "test_command" => arithmetic_test(text),
        "subscript" => node
            .child_by_field_name("index")
            .is_none_or(|index| !constant_index(index.utf8_text(bytes).unwrap_or(""))),
        _ => false,
    }
}

/// Arithmetic with numbers and operators only: no names, no expansions.
fn constant_arithmetic(text: &str) -> bool {
    let inner = text
        .trim_start_matches("for")
        .trim()
        .trim_start_matches("$((")
        .trim_start_matches("$[")
        .trim_start_matches("((");
    inner
        .chars()
        .all(|c| c.is_ascii_digit() || c.is_whitespace() || "+-*/%()<>=!&|^~?:,;]".contains(c))
}

fn constant_index(index: &str) -> bool {
    index == "@" || index == "*" || (!index.is_empty() && index.chars().all(|c| c.is_ascii_digit()))
}

/// `[[ … ]]` with an arithmetic comparison or `-v` evaluates its operands as arithmetic.
fn arithmetic_test(text: &str) -> bool {
    text.split_whitespace().any(|w| {
        matches!(
            w,
            "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge" | "-v" | "-R"
        )
    })
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `${NAME}`, `${#NAME}`, and `${NAME OP WORD}` where OP cannot evaluate anything and WORD
/// holds no expansion; a substring's offsets only as numbers.
fn plain_expansion(text: &str) -> bool {
    let Some(inner) = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) else {
        return false;
    };
    if inner == "#" {
        return true;
    }
    let (length, inner) = match inner.strip_prefix('#') {
        Some(rest) => (true, rest),
        None => (false, inner),
    };
    let name_len = if inner.starts_with(|c: char| "@*#?$!-".contains(c)) {
        1
    } else {
        inner
            .find(|c: char| !is_name_char(c))
            .unwrap_or(inner.len())
    };
    if name_len == 0 {
        // `${!x}` (indirection) and anything else that does not start with a name.
        return false;
    }
    let mut rest = &inner[name_len..];
    if let Some(after) = rest.strip_prefix('[') {
        let Some(close) = after.find(']') else {
            return false;
        };
        if !constant_index(&after[..close]) {
            return false;
        }
        rest = &after[close + 1..];
    }
    if rest.is_empty() {
        return true;
    }
    if length {
        return false;
    }
    if rest.contains(['$', '`']) {
        return false;
    }
    match rest.strip_prefix(':') {
        // `${x:offset:length}`: arithmetic, safe only as numbers.
        Some(offsets) if !offsets.starts_with(['-', '=', '+', '?']) => offsets
            .chars()
            .all(|c| c.is_ascii_digit() || c == ':' || c == ' ' || c == '-'),
        Some(_) => true,
        // `@P`, `@E` and the other transforms.
        None if rest.starts_with('@') => false,
        None => rest.starts_with(['-', '=', '+', '?', '#', '%', '/', '^', ',']),
    }
}

#[cfg(test)]
mod tests {
    use super::plain_expansion;

    #[test]
    fn only_plain_expansions_pass() {
        for plain in [
            "${x}",
            "${#x}",
            "${x:-a b}",
            "${x%%.*}",
            "${a[0]}",
            "${a[@]}",
            "${x:1:2}",
            "${1}",
            "${@}",
        ] {
            assert!(plain_expansion(plain), "{plain}");
        }
        for code in [
            "${x@P}",
            "${x@E}",
            "${!x}",
            "${a[i]}",
            "${x:i}",
            "${x:-`cmd`}",
            "${x:-$(cmd)}",
            "${x:=$y}",
            "${#a[i]}",
        ] {
            assert!(!plain_expansion(code), "{code}");
        }
    }
}

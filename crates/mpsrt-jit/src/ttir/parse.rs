//! A parser for the MLIR text Triton prints for TTIR (`str(mod)` with `loc(...)` locations, or
//! `mod.str_nodebug()`): modules, `tt.func`s and ops with nested regions (`scf.for`, `scf.if`,
//! `"tt.reduce"(...) ({ ^bb0(...): ... })`).
//!
//! MLIR's printer puts one op per line and opens a region with `{` (or `({` in the generic form)
//! at the end of a line, so the parser is line based: a line ending in `{` starts the op's
//! regions, `} else {` / `} do {` / `}, {` start the next one, and the closing line may carry
//! the rest of the op (`}) : (tensor<...>) -> f32`, `} {tt.num_stages = 2 : i32}`). Operands,
//! attributes and types stay text; `ttir::lower` reads what each op needs with the helpers here.

use mpsrt_core::{DType, Error, Result};
use std::collections::HashMap;

/// A Python source position, from a TTIR `loc("file":line:col)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = self.file.rsplit(['/', '\\']).next().unwrap_or(&self.file);
        write!(f, "{base}:{}:{}", self.line, self.col)
    }
}

/// One operation. `body` is the text after the op name without locations and regions;
/// `tail` is what followed the last region's closing brace.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub results: Vec<String>,
    pub name: String,
    pub body: String,
    pub regions: Vec<Region>,
    pub tail: String,
    /// 1-based line in the TTIR text.
    pub line: usize,
    pub loc: Option<Loc>,
}

/// A single-block region: its block arguments (`^bb0(%a: f32, ...)`) and ops.
#[derive(Debug, Clone, Default)]
pub(crate) struct Region {
    pub args: Vec<(String, String)>,
    pub ops: Vec<Op>,
}

/// A `tt.func`: parameters as (SSA name, type text) and the body ops.
#[derive(Debug, Clone)]
pub(crate) struct Func {
    pub name: String,
    pub public: bool,
    pub params: Vec<(String, String)>,
    pub body: Vec<Op>,
    pub loc: Option<Loc>,
}

/// Element type of a TTIR value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    D(DType),
    Ptr(DType),
}

/// A TTIR type: a scalar (`shape` empty) or a `tensor<AxBxT>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Type {
    pub shape: Vec<usize>,
    pub elem: Elem,
}

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::unsupported("triton", msg.into())
}

/// Parses a whole TTIR module into its functions.
pub(crate) fn parse_module(text: &str) -> Result<Vec<Func>> {
    let aliases = loc_aliases(text);
    let mut lines: Vec<Line> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("//") {
            continue;
        }
        let (code, loc) = strip_locs(t, &aliases);
        lines.push(Line { no: i + 1, text: code, loc });
    }
    let mut p = Parser { lines, at: 0 };
    let mut funcs = Vec::new();
    while p.at < p.lines.len() {
        let l = p.lines[p.at].clone();
        p.at += 1;
        if l.text.starts_with("module") || l.text == "}" {
            continue;
        }
        if l.text.starts_with("tt.func") {
            funcs.push(p.func(&l)?);
            continue;
        }
        return Err(err(format!("TTIR line {}: expected `tt.func`, found `{}`", l.no, l.text)));
    }
    Ok(funcs)
}

#[derive(Debug, Clone)]
struct Line {
    no: usize,
    text: String,
    loc: Option<Loc>,
}

struct Parser {
    lines: Vec<Line>,
    at: usize,
}

impl Parser {
    fn func(&mut self, l: &Line) -> Result<Func> {
        let t = &l.text;
        let public = t.contains(" public ");
        let at = t
            .find('@')
            .ok_or_else(|| err(format!("TTIR line {}: tt.func without a name", l.no)))?;
        let open =
            t[at..].find('(').map(|i| i + at).ok_or_else(|| err("tt.func without parameters"))?;
        let name = t[at + 1..open].to_string();
        let close = matching(t, open).ok_or_else(|| err("unbalanced tt.func parameters"))?;
        let mut params = Vec::new();
        for p in split_top(&t[open + 1..close], ',') {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            let (n, ty) = p.split_once(':').ok_or_else(|| err(format!("bad parameter `{p}`")))?;
            let ty = ty.trim();
            let ty = ty.split([' ', '{']).next().unwrap_or(ty);
            params.push((n.trim().to_string(), ty.to_string()));
        }
        let (region, _, loc) = self.region(l.no)?;
        Ok(Func { name, public, params, body: region.ops, loc: loc.or(l.loc.clone()) })
    }

    /// Reads ops up to the closing line of a region; returns the region, the closing line's
    /// text and its location.
    fn region(&mut self, opened_at: usize) -> Result<(Region, String, Option<Loc>)> {
        let mut r = Region::default();
        while self.at < self.lines.len() {
            let l = self.lines[self.at].clone();
            self.at += 1;
            if l.text.starts_with('}') {
                return Ok((r, l.text, l.loc));
            }
            if l.text.starts_with('^') {
                let open = l.text.find('(');
                if let (Some(o), Some(c)) = (open, open.and_then(|o| matching(&l.text, o))) {
                    for a in split_top(&l.text[o + 1..c], ',') {
                        if let Some((n, ty)) = a.split_once(':') {
                            r.args.push((n.trim().to_string(), ty.trim().to_string()));
                        }
                    }
                }
                continue;
            }
            r.ops.push(self.op(&l)?);
        }
        Err(err(format!("TTIR: region opened at line {opened_at} is not closed")))
    }

    fn op(&mut self, l: &Line) -> Result<Op> {
        let t = l.text.as_str();
        let (results, rest) = match t.starts_with('%') {
            true => match t.find(" = ") {
                Some(i) => (result_names(&t[..i]), t[i + 3..].trim()),
                None => (Vec::new(), t),
            },
            false => (Vec::new(), t),
        };
        let (name, after) = if let Some(s) = rest.strip_prefix('"') {
            let end = s.find('"').ok_or_else(|| err(format!("TTIR line {}: bad op name", l.no)))?;
            (s[..end].to_string(), &s[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            (rest[..end].to_string(), &rest[end..])
        };
        let mut op = Op {
            results,
            name,
            body: after.trim().to_string(),
            regions: Vec::new(),
            tail: String::new(),
            line: l.no,
            loc: l.loc.clone(),
        };
        if op.body.ends_with('{') {
            op.body =
                op.body.trim_end_matches('{').trim_end().trim_end_matches('(').trim().to_string();
            loop {
                let (region, close, loc) = self.region(l.no)?;
                op.regions.push(region);
                if op.loc.is_none() {
                    op.loc = loc;
                }
                let c = close[1..].trim();
                if c.ends_with('{') {
                    // `} else {`, `} do {`, `}, {`: the op's next region.
                    continue;
                }
                op.tail = c.trim_start_matches(')').trim().to_string();
                break;
            }
        }
        Ok(op)
    }
}

/// `%5` → [%5]; `%51:3` → [%51#0, %51#1, %51#2]; `%a, %b` → [%a, %b].
fn result_names(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        match part.split_once(':') {
            Some((n, k)) => {
                let k: usize = k.trim().parse().unwrap_or(1);
                out.extend((0..k).map(|i| format!("{n}#{i}")));
            }
            None => out.push(part.to_string()),
        }
    }
    out
}

/// Collects `#locN = loc(...)` definitions (the text inside `loc(...)`).
fn loc_aliases(text: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for l in text.lines() {
        let l = l.trim();
        if let Some((name, rest)) = l.split_once(" = loc(") {
            if name.starts_with("#loc") {
                m.insert(
                    name.trim().to_string(),
                    rest.trim_end().trim_end_matches(')').to_string(),
                );
            }
        }
    }
    m
}

/// Removes every `loc(...)` from a line; returns the code and the last location resolved.
fn strip_locs(line: &str, aliases: &HashMap<String, String>) -> (String, Option<Loc>) {
    let mut out = String::with_capacity(line.len());
    let mut loc = None;
    let mut rest = line;
    while let Some(i) = rest.find("loc(") {
        let boundary = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        if !boundary {
            out.push_str(&rest[..i + 4]);
            rest = &rest[i + 4..];
            continue;
        }
        out.push_str(&rest[..i]);
        let open = i + 3;
        let close = matching(rest, open).unwrap_or(rest.len() - 1);
        let mut found = Vec::new();
        collect_locs(&rest[open + 1..close], aliases, 0, &mut found);
        // Inlined `tl.*` helpers carry a call-site chain: prefer the user's kernel line over
        // Triton's own `triton/language/*.py`.
        let user = found.iter().position(|l| !l.file.contains("triton/language/"));
        if let Some(i) = user.or(if found.is_empty() { None } else { Some(0) }) {
            loc = Some(found.swap_remove(i));
        }
        rest = &rest[(close + 1).min(rest.len())..];
    }
    out.push_str(rest);
    (out.trim_end().to_string(), loc)
}

/// Every `"file":line:col` inside a location, in order, following `#locN` aliases.
fn collect_locs(s: &str, aliases: &HashMap<String, String>, depth: usize, out: &mut Vec<Loc>) {
    if depth > 16 {
        return;
    }
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        if b[i] == b'"' {
            let Some(end) = s[i + 1..].find('"').map(|e| e + i + 1) else { return };
            let after = &s[end + 1..];
            if let Some(nums) = after.strip_prefix(':') {
                let mut it = nums.split(|c: char| !c.is_ascii_digit());
                let line = it.next().and_then(|x| x.parse().ok());
                let col = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                if let Some(line) = line {
                    out.push(Loc { file: s[i + 1..end].to_string(), line, col });
                }
            }
            i = end + 1;
            continue;
        }
        if b[i] == b'#' {
            let end = s[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#' || c == '_'))
                .map_or(s.len(), |e| e + i);
            if let Some(def) = aliases.get(&s[i..end]) {
                collect_locs(def, aliases, depth + 1, out);
            }
            i = end;
            continue;
        }
        i += 1;
    }
}

/// Index of the bracket closing the one at `open` (`(`, `[`, `{` or `<`).
pub(crate) fn matching(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let (o, c) = match b.get(open)? {
        b'(' => (b'(', b')'),
        b'[' => (b'[', b']'),
        b'{' => (b'{', b'}'),
        b'<' => (b'<', b'>'),
        _ => return None,
    };
    let mut depth = 0i32;
    for (i, &x) in b.iter().enumerate().skip(open) {
        if x == o {
            depth += 1;
        } else if x == c && !(c == b'>' && i > 0 && b[i - 1] == b'-') {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Splits at `sep` outside brackets and quotes.
pub(crate) fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut quoted) = (0i32, 0usize, false);
    let b = s.as_bytes();
    for (i, ch) in s.char_indices() {
        match ch {
            '"' => quoted = !quoted,
            '(' | '[' | '{' | '<' if !quoted => depth += 1,
            ')' | ']' | '}' if !quoted => depth -= 1,
            // `->` is an arrow, not a closing bracket.
            '>' if !(quoted || i > 0 && b[i - 1] == b'-') => depth -= 1,
            c if c == sep && depth == 0 && !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Position of the last ` : ` outside brackets (where an op's type list starts).
pub(crate) fn type_split(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    let b = s.as_bytes();
    let mut last = None;
    for (i, &ch) in b.iter().enumerate() {
        match ch {
            b'(' | b'[' | b'{' | b'<' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'>' if !(i > 0 && b[i - 1] == b'-') => depth -= 1,
            b':' if depth == 0 && i > 0 && b[i - 1] == b' ' => last = Some(i),
            _ => {}
        }
    }
    last
}

/// The op's operands (`%x` tokens before the type list, outside attribute dictionaries).
pub(crate) fn operands(body: &str) -> Vec<String> {
    let head = match type_split(body) {
        Some(i) => &body[..i],
        None => body,
    };
    let mut out = Vec::new();
    let mut depth = 0i32;
    let b = head.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' | b'<' | b'[' => depth += 1,
            b'}' | b'>' | b']' => depth -= 1,
            b'%' if depth == 0 => {
                let end = head[i + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '#'))
                    .map_or(head.len(), |e| e + i + 1);
                out.push(head[i..end].to_string());
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The text after the op's ` : ` (its types), trimmed.
pub(crate) fn types_text(body: &str) -> &str {
    match type_split(body) {
        Some(i) => body[i + 1..].trim(),
        None => "",
    }
}

/// An integer attribute `key = N` anywhere in the text.
pub(crate) fn int_attr(s: &str, key: &str) -> Option<i64> {
    let pat = format!("{key} = ");
    let i = s.find(&pat)? + pat.len();
    let rest = &s[i..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Parses a TTIR type (`i32`, `!tt.ptr<f16>`, `tensor<64x32x!tt.ptr<f16>>`).
pub(crate) fn parse_type(s: &str) -> Result<Type> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix("tensor<").and_then(|x| x.strip_suffix('>')) {
        let inner = inner.split(',').next().unwrap_or(inner).trim();
        let mut shape = Vec::new();
        let mut rest = inner;
        loop {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if digits == 0 || !rest[digits..].starts_with('x') {
                break;
            }
            shape.push(rest[..digits].parse().map_err(|_| err(format!("bad tensor type `{s}`")))?);
            rest = &rest[digits + 1..];
        }
        let elem = parse_elem(rest).ok_or_else(|| unsupported_type(s))?;
        return Ok(Type { shape, elem });
    }
    let elem = parse_elem(s).ok_or_else(|| unsupported_type(s))?;
    Ok(Type { shape: Vec::new(), elem })
}

/// The error for a type outside the backend's set, with the reason for the common ones.
fn unsupported_type(s: &str) -> Error {
    let elem = s
        .trim_start_matches("tensor<")
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == 'x');
    let elem = elem.trim_start_matches("!tt.ptr<");
    if elem.starts_with("bf16") {
        err(format!("bfloat16 (`{s}`) is not supported: mpsrt tensors have no bfloat16 dtype (use float16 or float32)"))
    } else if elem.starts_with("f8") {
        err(format!("fp8 (`{s}`) is not supported: WGSL has no 8-bit float type and mpsrt tensors no fp8 dtype (use float16)"))
    } else {
        err(format!("unsupported type `{s}`"))
    }
}

fn parse_elem(s: &str) -> Option<Elem> {
    if let Some(inner) = s.strip_prefix("!tt.ptr<").and_then(|x| x.strip_suffix('>')) {
        let inner = inner.split(',').next().unwrap_or(inner).trim();
        return match parse_elem(inner)? {
            Elem::D(d) => Some(Elem::Ptr(d)),
            Elem::Ptr(_) => None,
        };
    }
    Some(Elem::D(match s {
        "i1" => DType::Bool,
        "i8" => DType::I8,
        "i16" | "i32" | "index" => DType::I32,
        "i64" => DType::I64,
        "f16" => DType::F16,
        "f32" => DType::F32,
        "f64" => DType::F64,
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_brackets() {
        let t = parse_type("tensor<64x32x!tt.ptr<f16>>").unwrap();
        assert_eq!(t.shape, vec![64, 32]);
        assert_eq!(t.elem, Elem::Ptr(DType::F16));
        assert_eq!(parse_type("i1").unwrap().elem, Elem::D(DType::Bool));
        assert!(parse_type("bf16").is_err());
        let body = "%9 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>";
        assert_eq!(operands(body), vec!["%9"]);
        assert_eq!(types_text(body), "tensor<64xi32> -> tensor<64x1xi32>");
        assert_eq!(int_attr(body, "axis"), Some(1));
        assert_eq!(result_names("%51:3"), vec!["%51#0", "%51#1", "%51#2"]);
    }

    #[test]
    fn locations_resolve_through_aliases() {
        let text = "module {\n  tt.func public @k(%arg0: i32 loc(\"a.py\":3:0)) attributes {noinline = false} {\n    %0 = tt.get_program_id x : i32 loc(#loc2)\n    %1 = tt.get_program_id y : i32 loc(#loc4)\n    tt.return loc(#loc3)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"/x/a.py\":3:0)\n#loc1 = loc(\"/x/a.py\":7:11)\n#loc2 = loc(\"pid\"(#loc1))\n#loc3 = loc(\"/x/a.py\":8:4)\n#loc4 = loc(callsite(#loc5 at #loc3))\n#loc5 = loc(\"/v/triton/language/standard.py\":216:16)\n";
        let f = parse_module(text).unwrap();
        assert_eq!(f[0].name, "k");
        assert_eq!(f[0].params, vec![("%arg0".to_string(), "i32".to_string())]);
        let op = &f[0].body[0];
        assert_eq!(op.name, "tt.get_program_id");
        assert_eq!(op.loc.as_ref().unwrap().to_string(), "a.py:7:11");
        // An inlined tl.* helper reports the kernel's call site, not Triton's library line.
        assert_eq!(f[0].body[1].loc.as_ref().unwrap().to_string(), "a.py:8:4");
    }
}

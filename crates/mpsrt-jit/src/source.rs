//! Parsing the Python module and mapping byte offsets back to Python line and column numbers.

use mpsrt_core::{Error, Result};
use rustpython_parser::ast::{self, Expr, Stmt};
use rustpython_parser::text_size::TextRange;
use std::collections::HashMap;

/// The parsed module: its `@jit` functions and a line table for error locations.
pub(crate) struct Source {
    /// Byte offset of the start of every line of the (dedented) text.
    line_starts: Vec<usize>,
    text: String,
    /// Columns removed by dedenting, added back in messages so they match the user's file.
    dedent: usize,
    pub funcs: Vec<ast::StmtFunctionDef>,
}

impl Source {
    pub fn parse(source: &str) -> Result<Source> {
        let (text, dedent) = dedent(source);
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let mut src = Source { line_starts, text, dedent, funcs: Vec::new() };
        let module =
            rustpython_parser::parse(&src.text, rustpython_parser::Mode::Module, "<kernel>")
                .map_err(|e| {
                    src.error_at_offset(
                        e.offset.into(),
                        &format!("Python syntax error: {}", e.error),
                    )
                })?;
        let body = match module {
            ast::Mod::Module(m) => m.body,
            _ => Vec::new(),
        };
        for stmt in body {
            // Host code (imports, autotune configs, launch helpers) is ignored; only `@jit`
            // functions are compiled.
            if let Stmt::FunctionDef(f) = stmt {
                if f.decorator_list.iter().any(is_jit_decorator) {
                    src.funcs.push(f);
                }
            }
        }
        Ok(src)
    }

    /// The kernel to compile and a map of every `@jit` function by name (callable helpers).
    pub fn find_kernel(
        &self,
        name: Option<&str>,
        arity: usize,
    ) -> Result<(&ast::StmtFunctionDef, HashMap<&str, &ast::StmtFunctionDef>)> {
        let map: HashMap<&str, &ast::StmtFunctionDef> =
            self.funcs.iter().map(|f| (f.name.as_str(), f)).collect();
        let kernel = match name {
            Some(n) => map.get(n).copied().ok_or_else(|| {
                Error::invalid(
                    "jit",
                    format!("no @jit function named `{n}` in the source (found: {})", self.names()),
                )
            })?,
            // The first @jit function that no other @jit function calls and that takes as many
            // parameters as the launch passes: helpers may be defined before or after it.
            None => {
                let uncalled = |f: &&ast::StmtFunctionDef| {
                    !self.funcs.iter().any(|g| g.name != f.name && self.calls(g, f.name.as_str()))
                };
                self.funcs
                    .iter()
                    .filter(uncalled)
                    .find(|f| f.args.args.len() == arity)
                    .or_else(|| self.funcs.iter().find(uncalled))
                    .or(self.funcs.first())
                .ok_or_else(|| {
                    Error::invalid("jit", "the source has no function decorated with @jit (`@mpsrt.jit` or `@triton.jit`)")
                })?
            }
        };
        Ok((kernel, map))
    }

    /// Whether the text of `g` mentions a call of `name` (good enough to tell helpers apart).
    fn calls(&self, g: &ast::StmtFunctionDef, name: &str) -> bool {
        let r = g.range;
        let body = self.text.get(usize::from(r.start())..usize::from(r.end())).unwrap_or("");
        let pat = format!("{name}(");
        body.match_indices(&pat).any(|(i, _)| {
            i > 0
                && !body[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
                && !body[..i].ends_with("def ")
        })
    }

    fn names(&self) -> String {
        self.funcs.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// `line L, col C` (1-based) of a byte offset.
    pub fn location(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let end = offset.min(self.text.len());
        let col = self.text.get(start..end).map_or(0, |s| s.chars().count());
        (line, col + 1 + self.dedent)
    }

    pub fn error_at_offset(&self, offset: usize, msg: &str) -> Error {
        let (l, c) = self.location(offset);
        Error::unsupported("jit", format!("line {l}, col {c}: {msg}"))
    }

    pub fn error_at(&self, range: TextRange, msg: &str) -> Error {
        self.error_at_offset(range.start().into(), msg)
    }
}

/// Whether a decorator is `@jit`, `@mpsrt.jit`, `@triton.jit` or a call of one of them.
fn is_jit_decorator(e: &Expr) -> bool {
    match e {
        Expr::Name(n) => n.id.as_str() == "jit",
        Expr::Attribute(a) => a.attr.as_str() == "jit",
        Expr::Call(c) => is_jit_decorator(&c.func),
        _ => false,
    }
}

/// Removes the common indentation of a source taken from inside a class or function
/// (`inspect.getsource` keeps it), which the parser would reject.
fn dedent(source: &str) -> (String, usize) {
    let indent = source
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    if indent == 0 {
        return (source.to_string(), 0);
    }
    let mut out = String::with_capacity(source.len());
    for line in source.split_inclusive('\n') {
        out.push_str(line.get(indent..).unwrap_or(line.trim_start_matches([' ', '\t'])));
    }
    (out, indent)
}

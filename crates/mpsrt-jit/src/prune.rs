//! Dead per-invocation arrays (`CompileOptions::prune_dead`).
//!
//! Lowering materializes every block value as a per-invocation array (`var tN: array<T, R>;`
//! filled by a loop or unrolled blocks), and later passes often read a block through its WGSL
//! template instead (`ttir::remat`, the staged dot's carried pointers), which leaves the array
//! written and never read. In Triton's matmul that is two pointer blocks and a mask block
//! recomputed in every K iteration — an integer modulo by a runtime value per element — whose
//! removal was left to the driver's compiler. This pass removes them from the module text: an
//! array whose every mention is a write `tN[..] = expr;` (with `expr` free of side effects) is
//! dropped with its writes, repeated until nothing changes (dropping one array's writes can
//! leave the arrays they read dead in turn); then the loops and blocks left holding nothing but
//! `let`s.

/// Removes dead arrays from `lines` (the entry point's body); `functions` (helper functions)
/// count as readers.
pub(crate) fn prune_dead_arrays(lines: &mut Vec<String>, functions: &[String]) {
    loop {
        let mut drop = vec![false; lines.len()];
        let mut any = false;
        for (d, l) in lines.iter().enumerate() {
            let Some(name) = declared_array(l) else { continue };
            if functions.iter().any(|f| mentions(f, name)) {
                continue;
            }
            let mut writes = Vec::new();
            let mut live = false;
            for (j, other) in lines.iter().enumerate() {
                if j == d || !mentions(other, name) {
                    continue;
                }
                if pure_write(other, name) {
                    writes.push(j);
                } else {
                    live = true;
                    break;
                }
            }
            if live {
                continue;
            }
            drop[d] = true;
            for j in writes {
                drop[j] = true;
            }
            any = true;
        }
        if !any {
            break;
        }
        let mut k = 0;
        lines.retain(|_| {
            k += 1;
            !drop[k - 1]
        });
    }
    drop_empty_blocks(lines);
}

/// Removes blocks (`{`, `for (..) {`, `if (..) {` lines up to their `}`) holding nothing but
/// side-effect-free `let`s, innermost first: what the dropped writes leave behind.
fn drop_empty_blocks(lines: &mut Vec<String>) {
    loop {
        let mut found = None;
        'open: for (o, l) in lines.iter().enumerate() {
            let t = l.trim();
            let opener = t == "{"
                || (t.ends_with(" {") && (t.starts_with("for (") || t.starts_with("if (")));
            if !opener || !pure(t) {
                continue;
            }
            for (k, inner) in lines.iter().enumerate().skip(o + 1) {
                let it = inner.trim();
                if it == "}" {
                    found = Some((o, k));
                    break 'open;
                }
                let one_let =
                    it.starts_with("let ") && it.ends_with(';') && it.matches(';').count() == 1;
                if !one_let || !pure(it) {
                    continue 'open;
                }
            }
        }
        let Some((o, k)) = found else { return };
        lines.drain(o..=k);
    }
}

/// Whether `text` calls nothing with side effects: no atomics (`at<k>_*` helpers, `atomic*`),
/// barriers, subgroup or cooperative-matrix operations, stores (`st<k>`).
fn pure(text: &str) -> bool {
    let effects = ["atomic", "Barrier", "workgroupUniformLoad", "subgroup", "coop"];
    if effects.iter().any(|e| text.contains(e)) {
        return false;
    }
    // Helpers `at<k>_<kind>_<type>` (atomic read-modify-writes) and `st<k>` (stores).
    let helper = |prefix: &str, next: char| {
        text.match_indices(prefix).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let tail = &text[i + prefix.len()..];
            let digits = tail.chars().take_while(char::is_ascii_digit).count();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && digits > 0
                && tail[digits..].starts_with(next)
        })
    };
    !helper("at", '_') && !helper("st", '(')
}

/// `NAME` of a line `var NAME: array<...>;` (one statement, nothing else on the line).
fn declared_array(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("var ")?;
    let (name, ty) = rest.split_once(": array<")?;
    (ident(name) && ty.ends_with(">;") && ty.matches(';').count() == 1).then_some(name)
}

fn ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `text` names `name` as a whole word.
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(at) = text[from..].find(name) {
        let (s, e) = (from + at, from + at + name.len());
        let before = text[..s].chars().next_back();
        let after = text[e..].chars().next();
        if !before.is_some_and(word) && !after.is_some_and(word) {
            return true;
        }
        from = e;
    }
    false
}

/// Whether `line` is exactly one statement `NAME[index] = expr;` whose right-hand side has no
/// side effects: no atomics (`at<k>_*` helpers, `atomic*`), barriers, subgroup or
/// cooperative-matrix operations, and no other statement on the line.
fn pure_write(line: &str, name: &str) -> bool {
    let t = line.trim();
    let Some(rest) = t.strip_prefix(name).and_then(|r| r.strip_prefix('[')) else {
        return false;
    };
    let Some((_, rhs)) = rest.split_once("] = ") else { return false };
    if !rhs.ends_with(';') || rhs[..rhs.len() - 1].contains(';') || rhs.contains('{') {
        return false;
    }
    pure(rhs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn drops_write_only_arrays_and_what_only_they_read() {
        let mut l = lines(
            "    var t1: array<i32, 4>;
    for (var i = 0u; i < 4u; i++) {
        let e = i * 128u + lid;
        t1[i] = i32(e) % P.s3;
    }
    var t2: array<i32, 4>;
    for (var i = 0u; i < 4u; i++) {
        t2[i] = t1[i] + 1i;
    }
    var t3: array<i32, 4>;
    {
        t3[i] = ld0(t12);
    }
    var t4: array<f32, 1>;
    {
        t4[i] = at0_add_f32(p, 1.0f);
    }
    var t5: array<i32, 1>;
    t5[0] = 1i;
    var t51: array<i32, 1>;
    t51[0] = t5[0];
    st1(p, f32(t51[0]));",
        );
        prune_dead_arrays(&mut l, &[]);
        let text = l.join("\n");
        // t2 reads t1 and nothing reads t2: both go; a load is pure; an atomic stays.
        for gone in ["var t1:", "t1[", "var t2:", "t2[", "var t3:", "t3["] {
            assert!(!text.contains(gone), "{gone}: {text}");
        }
        assert!(text.contains("var t4") && text.contains("t4[i] = at0_add_f32(p, 1.0f);"));
        // t5 is read by t51, which a store reads: both stay (t51 is not t5).
        assert!(text.contains("var t5:") && text.contains("t51[0] = t5[0];"), "{text}");
        // The loops and blocks left with nothing but `let`s go too; the atomic's stays.
        assert_eq!(text.matches("for (var i").count(), 0, "{text}");
        assert_eq!(text.matches('{').count(), 1, "{text}");
    }

    #[test]
    fn helper_functions_and_compound_lines_keep_arrays() {
        let mut l = lines("    var t7: array<i32, 2>;\n    t7[0] = 1i; t7[1] = 2i;\n    var t8: array<i32, 2>;\n    t8[0] = 3i;");
        prune_dead_arrays(&mut l, &["fn f() -> i32 { return t8[0]; }".to_string()]);
        assert_eq!(l.len(), 4, "{l:?}");
    }
}

//! `cargo xtask layers [--tree kernel|xtask]`: the layering check over a
//! crate's imports of its own modules.
//!
//! # The rules
//!
//! A crate's modules are grouped into *units*, and the units into *layers*,
//! declared lowest first in the crate's `layers.txt`. A module may refer to
//! modules of its own layer and of the layers below it, never above; and no
//! set of units may refer to each other in a cycle, within one layer or
//! across layers. Items defined in the crate root file (`lib.rs`/`main.rs`:
//! `crate::MAX_CPUS`, the `#[macro_export]` macros such as
//! `crate::kprintln!`) may be used from everywhere, and the root file itself
//! is outside the layers. Test code is not checked: files of modules
//! declared `#[cfg(test)] mod x;` (and below them), files named `tests.rs`,
//! and any item under `#[cfg(test)]`.
//!
//! # The declaration file
//!
//! ```text
//! # comment (also after a line's text)
//! layer NAME: UNIT UNIT ...
//! ```
//!
//! One line per layer, the lowest first. A UNIT is a module path from the
//! crate root (`vmm::operator`): that module and everything below it. A
//! UNIT `foo::*` makes `foo` itself (`foo.rs` or `foo/mod.rs`) one unit and
//! each child module of foo another (with everything below that child).
//! When several declared units contain a module, the longest path wins, and
//! a unit named outright beats one made by `*`.
//!
//! # What counts as a reference
//!
//! Every path to a module of the crate in non-test code: `use` declarations
//! (groups nested over lines, `self`, renames, globs), and paths in the code
//! itself (`crate::a::f()`, `super::x::Y`, `crate::kprintln!`), anchored at
//! `crate`, `$crate`, `self`, `super` (any number), or at a child module of
//! the file's own module (`use dist::Distributor;` in `vgic/mod.rs`).
//! Comments and string and character literals are stripped first. A path
//! refers to the deepest module it names that has a source file: an item or
//! an inline `mod x { }` resolves to its file's module. A `use` that names a
//! module (`pub use aarch64 as current;`, `pub use base::sync;`) is followed
//! when other paths go through the name it makes.
//!
//! The files are found by walking `src/`: `a/b.rs` and `a/b/mod.rs` are the
//! module `a::b`. (`#[path]` attributes are not followed: neither crate
//! checked here has one, and the report notes any it sees.)
//!
//! # The report
//!
//! - *undeclared*: a source file whose module is in no declared unit. For
//!   the cycle search it counts as part of the unit of its top-level module.
//! - *upward*: each reference from a unit of one layer to a unit of a higher
//!   layer, with its file and line.
//! - *cycle*: each strongly connected set of units, with one cycle through
//!   it and a file and line for each of that cycle's edges.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A module path from the crate root: `["vm", "sched"]` is `crate::vm::sched`,
/// the empty path the root.
type ModPath = Vec<String>;

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// `cargo xtask layers`: checks the kernel (default) or xtask itself.
pub fn command(args: &[String]) -> Result<(), String> {
    let mut tree = "kernel".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--tree" => tree = it.next().ok_or("--tree needs a value")?.clone(),
            other => return Err(format!("layers: unknown option '{other}' (try --help)")),
        }
    }
    let label = match tree.as_str() {
        "kernel" => "kernel",
        "xtask" => "tools/xtask",
        other => return Err(format!("layers: --tree {other}: use kernel or xtask")),
    };
    let report = check_dir(&crate::root().join(label))?;
    print!("{}", report.render(label));
    if report.is_clean() {
        Ok(())
    } else {
        Err(format!(
            "{label}: {} layering violation(s)",
            report.violations()
        ))
    }
}

/// Checks the crate in `crate_dir` (its `src/` against its `layers.txt`).
pub fn check_dir(crate_dir: &Path) -> Result<Report, String> {
    let decl_file = crate_dir.join("layers.txt");
    let decl =
        std::fs::read_to_string(&decl_file).map_err(|e| format!("{}: {e}", decl_file.display()))?;
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    read_sources(&src, Path::new(""), &mut files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    check(&files, &decl).map_err(|e| format!("{}: {e}", decl_file.display()))
}

/// Every `.rs` file under `src/rel`, with its path relative to `src`.
fn read_sources(src: &Path, rel: &Path, out: &mut Vec<(PathBuf, String)>) -> Result<(), String> {
    let dir = src.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let rel = rel.join(entry.file_name());
        let path = src.join(&rel);
        if path.is_dir() {
            read_sources(src, &rel, out)?;
        } else if rel.extension().is_some_and(|e| e == "rs") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.push((rel, text));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The declaration file

/// The parsed `layers.txt`.
#[derive(Debug)]
struct Decl {
    /// Layer names, lowest first.
    layers: Vec<String>,
    units: Vec<UnitDecl>,
}

/// One UNIT of a `layer` line.
#[derive(Debug)]
struct UnitDecl {
    path: ModPath,
    /// `path::*`: each child of `path` is a unit of its own.
    children: bool,
    layer: usize,
}

/// The unit a module belongs to: declared (with its layer), or for an
/// undeclared module its top-level module, with no layer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Unit {
    name: String,
    layer: Option<usize>,
}

fn parse_decl(text: &str) -> Result<Decl, String> {
    let mut decl = Decl {
        layers: Vec::new(),
        units: Vec::new(),
    };
    let mut named = BTreeSet::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |what: &str| format!("line {}: {what}: `{}`", n + 1, raw.trim());
        let (name, units) = line
            .strip_prefix("layer ")
            .and_then(|rest| rest.split_once(':'))
            .ok_or_else(|| err("expected `layer NAME: UNIT ...`"))?;
        let name = name.trim();
        if !is_ident(name) {
            return Err(err("a layer's name is one word"));
        }
        if decl.layers.iter().any(|l| l == name) {
            return Err(err("layer declared twice"));
        }
        let layer = decl.layers.len();
        decl.layers.push(name.to_string());
        for unit in units.split_whitespace() {
            let (path, children) = match unit.strip_suffix("::*") {
                Some(p) => (p, true),
                None => (unit, false),
            };
            let path: ModPath = path.split("::").map(str::to_string).collect();
            if !path.iter().all(|s| is_ident(s)) || path[0] == "crate" {
                return Err(err(&format!(
                    "`{unit}` is not a module path from the crate root"
                )));
            }
            // `foo` and `foo::*` both make the unit `foo`.
            if !named.insert(path.clone()) {
                return Err(err(&format!("unit `{}` declared twice", show(&path))));
            }
            decl.units.push(UnitDecl {
                path,
                children,
                layer,
            });
        }
        if decl.units.last().is_none_or(|u| u.layer != layer) {
            return Err(err("a layer needs at least one unit"));
        }
    }
    if decl.layers.is_empty() {
        return Err("no `layer NAME: UNIT ...` line".to_string());
    }
    Ok(decl)
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_alphabetic() || f == '_')
        && c.all(|ch| ch.is_alphanumeric() || ch == '_')
}

impl Decl {
    /// The declared unit of module `m`: the longest matching declaration,
    /// one named outright before one made by `*`.
    fn unit_of(&self, m: &[String]) -> Option<Unit> {
        let mut best: Option<(usize, bool, Unit)> = None;
        for u in &self.units {
            let n = u.path.len();
            if !m.starts_with(&u.path) {
                continue;
            }
            let (len, outright, name) = if !u.children || m.len() == n {
                (n, true, show(&u.path))
            } else {
                (n + 1, false, show(&m[..n + 1]))
            };
            if best
                .as_ref()
                .is_none_or(|(bl, bo, _)| (len, outright) > (*bl, *bo))
            {
                let unit = Unit {
                    name,
                    layer: Some(u.layer),
                };
                best = Some((len, outright, unit));
            }
        }
        best.map(|(_, _, u)| u)
    }

    /// [`Decl::unit_of`], or the top-level module's provisional unit.
    fn unit_or_top(&self, m: &[String]) -> Unit {
        self.unit_of(m).unwrap_or_else(|| Unit {
            name: m[0].clone(),
            layer: None,
        })
    }
}

// ---------------------------------------------------------------------------
// The lexer: identifiers, `::` and punctuation, with comments dropped and
// literals reduced to a placeholder.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
    /// A string, character or number literal, or a lifetime.
    Lit,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: u32,
}

fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1u32);
    while i < c.len() {
        let ch = c[i];
        let start = line;
        let tok = if ch == '\n' {
            line += 1;
            i += 1;
            continue;
        } else if ch.is_whitespace() {
            i += 1;
            continue;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        } else if ch == '/' && at(i + 1) == '*' {
            i = skip_block_comment(&c, i, &mut line);
            continue;
        } else if ch == '"' {
            i = skip_string(&c, i + 1, &mut line);
            Tok::Lit
        } else if ch == '\'' {
            i = skip_quote(&c, i);
            Tok::Lit
        } else if let Some(end) = prefixed_literal(&c, i, &mut line) {
            i = end;
            Tok::Lit
        } else if is_ident_start(ch) {
            // A raw identifier `r#type` is the identifier `type`.
            if ch == 'r' && at(i + 1) == '#' {
                i += 2;
            }
            let from = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            Tok::Ident(c[from..i].iter().collect())
        } else if ch.is_ascii_digit() {
            while i < c.len() && (is_ident_char(c[i]) || c[i] == '.' && at(i + 1).is_ascii_digit())
            {
                i += 1;
            }
            Tok::Lit
        } else if ch == ':' && at(i + 1) == ':' {
            i += 2;
            Tok::PathSep
        } else {
            i += 1;
            Tok::Punct(ch)
        };
        toks.push(Token { tok, line: start });
    }
    toks
}

fn is_ident_start(ch: char) -> bool {
    ch.is_alphabetic() || ch == '_'
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Past a (nesting) block comment starting at `i`.
fn skip_block_comment(c: &[char], mut i: usize, line: &mut u32) -> usize {
    let mut depth = 0;
    while i < c.len() {
        match (c[i], c.get(i + 1).copied()) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            (ch, _) => {
                *line += u32::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// Past the closing `"` of a string whose text starts at `i`.
fn skip_string(c: &[char], mut i: usize, line: &mut u32) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => {
                *line += u32::from(c.get(i + 1) == Some(&'\n'));
                i += 2;
            }
            '"' => return i + 1,
            ch => {
                *line += u32::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// Past a character literal (`'x'`, `'\n'`, `'\u{7f}'`) or a lifetime or
/// label (`'a`, `'static`) starting at the `'` at `i`.
fn skip_quote(c: &[char], i: usize) -> usize {
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    if at(i + 1) == '\\' {
        // The escaped character itself may be a `'`.
        let mut j = i + 3;
        while j < c.len() && c[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if at(i + 2) == '\'' {
        i + 3
    } else {
        let mut j = i + 1;
        while j < c.len() && is_ident_char(c[j]) {
            j += 1;
        }
        j.max(i + 1)
    }
}

/// Past a literal with a prefix at `i` (`b"…"`, `b'x'`, `c"…"`, `r"…"`,
/// `r#"…"#`, `br#"…"#`, `cr"…"`), if one starts there.
fn prefixed_literal(c: &[char], i: usize, line: &mut u32) -> Option<usize> {
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let mut j = i;
    if matches!(c[j], 'b' | 'c') {
        j += 1;
    }
    if at(j) != 'r' {
        return match at(j) {
            '"' if j > i => Some(skip_string(c, j + 1, line)),
            '\'' if c[i] == 'b' => Some(skip_quote(c, j)),
            _ => None,
        };
    }
    j += 1;
    let hashes = (j..c.len()).take_while(|&k| c[k] == '#').count();
    if at(j + hashes) != '"' {
        return None;
    }
    let mut k = j + hashes + 1;
    while k < c.len() {
        if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
            return Some(k + 1 + hashes);
        }
        *line += u32::from(c[k] == '\n');
        k += 1;
    }
    Some(k)
}

// ---------------------------------------------------------------------------
// Scanning one file's tokens for paths

/// Where a path starts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Anchor {
    /// `crate::` (or `$crate::` in a macro).
    Crate,
    /// `self::`
    SelfMod,
    /// `super::` N times.
    Super(usize),
    /// A plain name: a child module (or a name a `use` made), or else
    /// another crate.
    Bare,
}

#[derive(Clone, Debug, PartialEq)]
enum RefKind {
    /// A path in the code.
    Code,
    /// A leaf of a `use` tree: the name it makes (`as`), or a glob.
    Use { rename: Option<String>, glob: bool },
}

/// One path in a file.
#[derive(Clone, Debug, PartialEq)]
struct PathRef {
    anchor: Anchor,
    /// The segments after the anchor.
    segs: Vec<String>,
    /// The inline `mod x { }` blocks the path sits in.
    inline: Vec<String>,
    line: u32,
    /// The path as written (a `use` leaf with its group's prefix).
    text: String,
    kind: RefKind,
}

/// What one file says about the crate's modules.
#[derive(Debug, Default)]
struct Scan {
    refs: Vec<PathRef>,
    /// Modules declared `#[cfg(test)] mod x;`, relative to the file's module.
    test_mods: Vec<ModPath>,
    /// `#![cfg(test)]`: the whole file is test code.
    is_test: bool,
    /// Things the check does not follow.
    notes: Vec<String>,
}

fn scan(src: &str) -> Scan {
    let toks = lex(src);
    let mut s = Scanner {
        toks: &toks,
        i: 0,
        depth: 0,
        inline: Vec::new(),
        out: Scan::default(),
    };
    s.run();
    s.out
}

struct Scanner<'a> {
    toks: &'a [Token],
    i: usize,
    /// Brace depth.
    depth: usize,
    /// Open inline modules: name and the depth outside their braces.
    inline: Vec<(String, usize)>,
    out: Scan,
}

/// Keywords that start an item whose end is a `;` or its first `{ }`.
const ITEM_KEYWORDS: &[&str] = &[
    "fn",
    "mod",
    "impl",
    "struct",
    "enum",
    "union",
    "trait",
    "const",
    "static",
    "use",
    "type",
    "extern",
    "unsafe",
    "async",
    "macro_rules",
];

impl Scanner<'_> {
    fn tok(&self, k: usize) -> Option<&Tok> {
        self.toks.get(k).map(|t| &t.tok)
    }

    fn is_punct(&self, k: usize, ch: char) -> bool {
        self.tok(k) == Some(&Tok::Punct(ch))
    }

    fn ident(&self, k: usize) -> Option<&str> {
        match self.tok(k) {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }

    fn run(&mut self) {
        while self.i < self.toks.len() {
            match self.tok(self.i).cloned() {
                Some(Tok::Punct('#')) => self.attribute(),
                Some(Tok::Punct('{')) => {
                    self.depth += 1;
                    self.i += 1;
                }
                Some(Tok::Punct('}')) => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.inline.last().is_some_and(|(_, d)| *d == self.depth) {
                        self.inline.pop();
                    }
                    self.i += 1;
                }
                Some(Tok::Ident(k)) if k == "use" && !self.is_punct(self.i + 1, '<') => {
                    self.use_decl()
                }
                // A visibility `pub(crate)`, `pub(in crate::a)` is no reference.
                Some(Tok::Ident(k)) if k == "pub" && self.is_punct(self.i + 1, '(') => {
                    self.i = self.matching(self.i + 1) + 1;
                }
                Some(Tok::Ident(k)) if k == "mod" => {
                    if let Some(name) = self.ident(self.i + 1) {
                        if self.is_punct(self.i + 2, '{') {
                            self.inline.push((name.to_string(), self.depth));
                        }
                    }
                    self.i += 1;
                }
                Some(Tok::Ident(_)) => self.code_path(),
                _ => self.i += 1,
            }
        }
    }

    /// The index of the bracket closing the one at `open` (the last token
    /// if unbalanced).
    fn matching(&self, open: usize) -> usize {
        let mut depth = 0usize;
        for k in open..self.toks.len() {
            match self.tok(k) {
                Some(Tok::Punct('(' | '[' | '{')) => depth += 1,
                Some(Tok::Punct(')' | ']' | '}')) => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return k;
                    }
                }
                _ => {}
            }
        }
        self.toks.len().saturating_sub(1)
    }

    /// An attribute at `#`: skips it, and with the item it is on when it is
    /// `#[cfg(test)]`.
    fn attribute(&mut self) {
        let inner = self.is_punct(self.i + 1, '!');
        let open = self.i + 1 + usize::from(inner);
        if !self.is_punct(open, '[') {
            self.i += 1;
            return;
        }
        let close = self.matching(open);
        let body = &self.toks[open + 1..close.max(open + 1)];
        let path_attr = matches!(body.first(), Some(Token { tok: Tok::Ident(p), .. }) if p == "path")
            && matches!(
                body.get(1),
                Some(Token {
                    tok: Tok::Punct('='),
                    ..
                })
            );
        if path_attr {
            let line = self.toks[self.i].line;
            self.out
                .notes
                .push(format!("line {line}: a #[path] attribute, not followed"));
        }
        let test = is_test_cfg(body);
        self.i = close + 1;
        if !test {
            return;
        }
        if !inner {
            self.skip_item();
        } else if self.inline.is_empty() {
            self.out.is_test = true;
            self.i = self.toks.len();
        } else {
            // `#![cfg(test)]` in an inline module: on to its closing brace.
            while self.i < self.toks.len() && !self.is_punct(self.i, '}') {
                self.i = match self.tok(self.i) {
                    Some(Tok::Punct('{' | '(' | '[')) => self.matching(self.i) + 1,
                    _ => self.i + 1,
                };
            }
        }
    }

    /// Skips the item (or statement, field, ...) after a `#[cfg(test)]`,
    /// noting a `mod x;` it declares.
    fn skip_item(&mut self) {
        while self.is_punct(self.i, '#') {
            let open = self.i + 1 + usize::from(self.is_punct(self.i + 1, '!'));
            if !self.is_punct(open, '[') {
                break;
            }
            self.i = self.matching(open) + 1;
        }
        let mut k = self.i;
        if self.ident(k) == Some("pub") {
            k += 1;
            if self.is_punct(k, '(') {
                k = self.matching(k) + 1;
            }
        }
        if let (Some("mod"), Some(name), true) =
            (self.ident(k), self.ident(k + 1), self.is_punct(k + 2, ';'))
        {
            let mut m: ModPath = self.inline.iter().map(|(n, _)| n.clone()).collect();
            m.push(name.to_string());
            self.out.test_mods.push(m);
        }
        let item = self.ident(k).is_some_and(|w| ITEM_KEYWORDS.contains(&w));
        let mut j = self.i;
        while j < self.toks.len() {
            match self.tok(j) {
                Some(Tok::Punct('(' | '[')) => j = self.matching(j) + 1,
                Some(Tok::Punct('{')) => {
                    j = self.matching(j) + 1;
                    if item {
                        break;
                    }
                }
                Some(Tok::Punct(';')) => {
                    j += 1;
                    break;
                }
                Some(Tok::Punct(',')) if !item => {
                    j += 1;
                    break;
                }
                Some(Tok::Punct(')' | ']' | '}')) => break,
                _ => j += 1,
            }
        }
        self.i = j;
    }

    /// A `use` declaration: each leaf of its tree is a path.
    fn use_decl(&mut self) {
        self.i += 1;
        let mut leaves = Vec::new();
        self.use_tree(Vec::new(), &mut leaves);
        while self.i < self.toks.len() && !self.is_punct(self.i, ';') {
            self.i += 1;
        }
        self.i += 1;
        for leaf in leaves {
            self.push_use_leaf(leaf);
        }
    }

    /// One use tree (`a::b::{c, d::*}`), its leaves pushed after `prefix`.
    fn use_tree(&mut self, prefix: Vec<(String, u32)>, leaves: &mut Vec<UseLeaf>) {
        let mut segs = prefix;
        loop {
            let line = self.toks.get(self.i).map_or(0, |t| t.line);
            match self.tok(self.i).cloned() {
                Some(Tok::PathSep) => {
                    // A leading `::`: another crate.
                    segs.push(("::".to_string(), line));
                    self.i += 1;
                }
                // The `$` of `$crate` in a macro.
                Some(Tok::Punct('$')) => self.i += 1,
                Some(Tok::Ident(s)) => {
                    segs.push((s, line));
                    self.i += 1;
                    if self.tok(self.i) == Some(&Tok::PathSep) {
                        self.i += 1;
                        continue;
                    }
                    let mut rename = None;
                    if self.ident(self.i) == Some("as") {
                        rename = self.ident(self.i + 1).map(str::to_string);
                        self.i += 2;
                    }
                    leaves.push(UseLeaf {
                        segs,
                        rename,
                        glob: false,
                    });
                    return;
                }
                Some(Tok::Punct('*')) => {
                    self.i += 1;
                    segs.push(("*".to_string(), line));
                    leaves.push(UseLeaf {
                        segs,
                        rename: None,
                        glob: true,
                    });
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.i += 1;
                    loop {
                        match self.tok(self.i) {
                            None => return,
                            Some(Tok::Punct('}')) => {
                                self.i += 1;
                                return;
                            }
                            Some(Tok::Punct(',')) => self.i += 1,
                            Some(_) => {
                                let before = self.i;
                                self.use_tree(segs.clone(), leaves);
                                if self.i == before {
                                    self.i += 1;
                                }
                            }
                        }
                    }
                }
                _ => return,
            }
        }
    }

    fn push_use_leaf(&mut self, leaf: UseLeaf) {
        let mut segs: Vec<String> = leaf.segs.iter().map(|(s, _)| s.clone()).collect();
        let line = leaf.segs.last().map_or(0, |(_, l)| *l);
        let mut text = format!("use {}", segs.join("::"));
        if let Some(r) = &leaf.rename {
            let _ = write!(text, " as {r}");
        }
        if leaf.glob {
            segs.pop();
        }
        // `a::{self}` is `a`.
        if segs.len() > 1 && segs.last().is_some_and(|s| s == "self") {
            segs.pop();
        }
        self.push_ref(
            segs,
            line,
            text,
            RefKind::Use {
                rename: leaf.rename,
                glob: leaf.glob,
            },
        );
    }

    /// A path in the code starting at the identifier at `i`, if it is the
    /// first segment of one (`a::b`, not the `b` of `x::b`).
    fn code_path(&mut self) {
        let after_sep = self.i > 0 && self.tok(self.i - 1) == Some(&Tok::PathSep);
        if after_sep || self.tok(self.i + 1) != Some(&Tok::PathSep) {
            self.i += 1;
            return;
        }
        let line = self.toks[self.i].line;
        let mut segs = vec![self.ident(self.i).unwrap_or_default().to_string()];
        let mut j = self.i + 1;
        while self.tok(j) == Some(&Tok::PathSep) {
            match self.ident(j + 1) {
                Some(s) => segs.push(s.to_string()),
                None => break,
            }
            j += 2;
        }
        let mut text = segs.join("::");
        if self.is_punct(j, '!') {
            text.push('!');
        }
        self.i = j;
        self.push_ref(segs, line, text, RefKind::Code);
    }

    fn push_ref(&mut self, segs: Vec<String>, line: u32, text: String, kind: RefKind) {
        let Some((anchor, segs)) = split_anchor(segs) else {
            return;
        };
        self.out.refs.push(PathRef {
            anchor,
            segs,
            inline: self.inline.iter().map(|(n, _)| n.clone()).collect(),
            line,
            text,
            kind,
        });
    }
}

/// A leaf of a use tree: its segments with their lines.
struct UseLeaf {
    segs: Vec<(String, u32)>,
    rename: Option<String>,
    glob: bool,
}

/// A path's anchor and the segments after it; `None` for `::other_crate`.
fn split_anchor(segs: Vec<String>) -> Option<(Anchor, Vec<String>)> {
    let first = segs.first()?.as_str();
    let (skip, anchor) = match first {
        "::" => return None,
        "crate" => (1, Anchor::Crate),
        "self" | "super" => {
            let from = usize::from(first == "self");
            let n = segs[from..].iter().take_while(|s| *s == "super").count();
            let anchor = if n == 0 {
                Anchor::SelfMod
            } else {
                Anchor::Super(n)
            };
            (from + n, anchor)
        }
        _ => (0, Anchor::Bare),
    };
    Some((anchor, segs[skip..].to_vec()))
}

/// Whether the body of an attribute is `cfg(P)` with `P` true only in test
/// builds: `test`, `all(.., test, ..)`, `any(<test-only>, ..)`.
fn is_test_cfg(body: &[Token]) -> bool {
    matches!(call(body), Some(("cfg", pred)) if test_only(pred))
}

fn test_only(pred: &[Token]) -> bool {
    if let [Token {
        tok: Tok::Ident(t), ..
    }] = pred
    {
        return t == "test";
    }
    let Some((name, args)) = call(pred) else {
        return false;
    };
    let args = split_commas(args);
    match name {
        "all" => args.iter().any(|a| test_only(a)),
        "any" => !args.is_empty() && args.iter().all(|a| test_only(a)),
        _ => false,
    }
}

/// `name(...)`: the name and the tokens inside the parentheses.
fn call(toks: &[Token]) -> Option<(&str, &[Token])> {
    let (Tok::Ident(name), Tok::Punct('('), Tok::Punct(')'), true) = (
        &toks.first()?.tok,
        &toks.get(1)?.tok,
        &toks.last()?.tok,
        toks.len() >= 3,
    ) else {
        return None;
    };
    Some((name, &toks[2..toks.len() - 1]))
}

/// The comma-separated parts of a token list, outside brackets.
fn split_commas(toks: &[Token]) -> Vec<&[Token]> {
    let (mut parts, mut from, mut depth) = (Vec::new(), 0, 0usize);
    for (k, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => depth = depth.saturating_sub(1),
            Tok::Punct(',') if depth == 0 => {
                parts.push(&toks[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&toks[from..]);
    parts.retain(|p| !p.is_empty());
    parts
}

// ---------------------------------------------------------------------------
// The crate: its modules and the names `use` gives them

/// The module a file under `src/` holds: `a/b.rs` and `a/b/mod.rs` are
/// `a::b`, `lib.rs` and `main.rs` the root.
fn module_of(rel: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && matches!(stem, "lib" | "main") {
        return Some(Vec::new());
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// One non-test source file.
struct File {
    /// Relative to `src/`.
    rel: PathBuf,
    module: ModPath,
    scan: Scan,
}

/// The crate's modules and the names that lead to them.
#[derive(Default)]
struct Tree {
    modules: BTreeSet<ModPath>,
    /// `use x as name;` in module M: (M, name) → x, for a module x.
    aliases: BTreeMap<(ModPath, String), BTreeSet<ModPath>>,
    /// `use x::*;` in module M: M → x.
    globs: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl Tree {
    /// The modules `seg` names in module `at`: a child module, else (with
    /// `names`) a name a `use` made there.
    fn step(&self, at: &[String], seg: &str, names: bool) -> Vec<ModPath> {
        let child = |m: &[String]| {
            let mut c = m.to_vec();
            c.push(seg.to_string());
            c
        };
        if self.modules.contains(&child(at)) {
            return vec![child(at)];
        }
        if !names {
            return Vec::new();
        }
        if let Some(t) = self.aliases.get(&(at.to_vec(), seg.to_string())) {
            return t.iter().cloned().collect();
        }
        let mut out = Vec::new();
        for g in self.globs.get(at).into_iter().flatten() {
            if self.modules.contains(&child(g)) {
                out.push(child(g));
            } else if let Some(t) = self.aliases.get(&(g.clone(), seg.to_string())) {
                out.extend(t.iter().cloned());
            }
        }
        out
    }

    /// From module `start`, follows `segs` while they name modules: each
    /// deepest module reached, and whether it took every segment.
    fn walk(&self, start: ModPath, segs: &[String]) -> Vec<(ModPath, bool)> {
        let mut done = BTreeSet::new();
        let mut todo = vec![(start, 0)];
        while let Some((at, n)) = todo.pop() {
            let next = match segs.get(n) {
                Some(seg) => self.step(&at, seg, true),
                None => Vec::new(),
            };
            if next.is_empty() {
                done.insert((at, n == segs.len()));
            }
            todo.extend(next.into_iter().map(|m| (m, n + 1)));
        }
        done.into_iter().collect()
    }

    /// The modules path `r` in module `module` refers to.
    fn resolve(&self, module: &[String], r: &PathRef) -> Vec<(ModPath, bool)> {
        let mut base = module.to_vec();
        base.extend(r.inline.iter().cloned());
        let abs = match r.anchor {
            Anchor::Crate => r.segs.clone(),
            Anchor::SelfMod => [base, r.segs.clone()].concat(),
            Anchor::Super(n) if n <= base.len() => [&base[..base.len() - n], &r.segs[..]].concat(),
            Anchor::Super(_) => return Vec::new(),
            Anchor::Bare => {
                // A child module (in a `use`, also a name a `use` made);
                // anything else is another crate or not a module.
                let Some((first, rest)) = r.segs.split_first() else {
                    return Vec::new();
                };
                if !r.inline.is_empty() {
                    return Vec::new();
                }
                let names = matches!(r.kind, RefKind::Use { .. });
                return self
                    .step(module, first, names)
                    .into_iter()
                    .flat_map(|m| self.walk(m, rest))
                    .collect();
            }
        };
        self.walk(Vec::new(), &abs)
    }

    /// Records the names the `use` declarations of `files` give modules,
    /// until nothing changes (a name may lead through another).
    fn add_names(&mut self, files: &[File]) {
        loop {
            let mut changed = false;
            for f in files {
                for r in f.scan.refs.iter().filter(|r| r.inline.is_empty()) {
                    let RefKind::Use { rename, glob } = &r.kind else {
                        continue;
                    };
                    let name = match (glob, rename, r.segs.last()) {
                        (true, _, _) => None,
                        (false, Some(n), _) => Some(n.clone()),
                        (false, None, Some(last)) => Some(last.clone()),
                        (false, None, None) => continue,
                    };
                    let targets: Vec<ModPath> = self
                        .resolve(&f.module, r)
                        .into_iter()
                        .filter(|(_, whole)| *whole)
                        .map(|(m, _)| m)
                        .collect();
                    if targets.is_empty() || name.as_deref() == Some("_") {
                        continue;
                    }
                    let set = match name {
                        Some(n) => self.aliases.entry((f.module.clone(), n)).or_default(),
                        None => self.globs.entry(f.module.clone()).or_default(),
                    };
                    for t in targets {
                        changed |= set.insert(t);
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The check

/// Where a reference is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    /// Relative to the crate's `src/`.
    pub file: PathBuf,
    pub line: u32,
    pub text: String,
}

#[derive(Debug)]
pub struct Upward {
    pub site: Site,
    pub from: String,
    pub from_layer: String,
    pub to: String,
    pub to_layer: String,
}

#[derive(Debug)]
pub struct Cycle {
    /// The units of the strongly connected set.
    pub members: Vec<String>,
    /// One cycle through it: each edge with one reference that makes it.
    pub steps: Vec<(String, String, Site)>,
}

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct Report {
    pub layers: Vec<String>,
    /// Units with a source file: declared ones, and the top-level modules
    /// of undeclared files.
    pub units: usize,
    pub provisional: usize,
    /// Distinct unit-to-unit edges.
    pub edges: usize,
    /// Undeclared files (relative to `src/`) and their modules.
    pub undeclared: Vec<(PathBuf, String)>,
    pub upward: Vec<Upward>,
    pub cycles: Vec<Cycle>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.undeclared.len() + self.upward.len() + self.cycles.len()
    }

    pub fn is_clean(&self) -> bool {
        self.violations() == 0
    }
}

/// Checks the sources `files` (paths relative to `src/`, with their text)
/// against the declaration `decl`.
fn check(files: &[(PathBuf, String)], decl: &str) -> Result<Report, String> {
    let decl = parse_decl(decl)?;
    let files = crate_files(files);
    let mut tree = Tree {
        modules: files.iter().map(|f| f.module.clone()).collect(),
        ..Tree::default()
    };
    tree.add_names(&files);

    let mut report = Report {
        layers: decl.layers.clone(),
        ..Report::default()
    };
    let mut units: BTreeMap<String, Option<usize>> = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), BTreeSet<Site>> = BTreeMap::new();
    for f in &files {
        for n in &f.scan.notes {
            report.notes.push(format!("{}: {n}", f.rel.display()));
        }
        if f.module.is_empty() {
            continue;
        }
        let from = decl.unit_or_top(&f.module);
        if from.layer.is_none() {
            report.undeclared.push((f.rel.clone(), show(&f.module)));
        }
        units.insert(from.name.clone(), from.layer);
        for r in &f.scan.refs {
            for (target, _) in tree.resolve(&f.module, r) {
                if target.is_empty() {
                    continue;
                }
                let to = decl.unit_or_top(&target);
                if to.name == from.name {
                    continue;
                }
                let site = Site {
                    file: f.rel.clone(),
                    line: r.line,
                    text: r.text.clone(),
                };
                let new = edges
                    .entry((from.name.clone(), to.name.clone()))
                    .or_default()
                    .insert(site.clone());
                if let (true, Some(i), Some(j)) = (new, from.layer, to.layer) {
                    if j > i {
                        report.upward.push(Upward {
                            site,
                            from: from.name.clone(),
                            from_layer: decl.layers[i].clone(),
                            to: to.name.clone(),
                            to_layer: decl.layers[j].clone(),
                        });
                    }
                }
            }
        }
    }
    for u in &decl.units {
        let used = tree.modules.iter().any(|m| m.starts_with(&u.path));
        if !used {
            let star = if u.children { "::*" } else { "" };
            report.notes.push(format!(
                "unit `{}{star}` (layer {}) matches no source file",
                show(&u.path),
                decl.layers[u.layer]
            ));
        }
    }
    report.upward.sort_by(|a, b| a.site.cmp(&b.site));
    report.units = units.len();
    report.provisional = units.values().filter(|l| l.is_none()).count();
    report.edges = edges.len();
    report.cycles = cycles(&edges);
    Ok(report)
}

/// The crate's non-test files with their modules and scans.
fn crate_files(sources: &[(PathBuf, String)]) -> Vec<File> {
    let mut files: Vec<File> = sources
        .iter()
        .filter_map(|(rel, text)| {
            Some(File {
                rel: rel.clone(),
                module: module_of(rel)?,
                scan: scan(text),
            })
        })
        .collect();
    // Test code: `tests.rs`, `#![cfg(test)]` files, `#[cfg(test)] mod x;`,
    // and every module below them.
    let mut test_mods: Vec<ModPath> = Vec::new();
    for f in &files {
        if f.scan.is_test || f.rel.file_name().is_some_and(|n| n == "tests.rs") {
            test_mods.push(f.module.clone());
        }
        for m in &f.scan.test_mods {
            test_mods.push([f.module.clone(), m.clone()].concat());
        }
    }
    files.retain(|f| {
        !test_mods
            .iter()
            .any(|t| !t.is_empty() && f.module.starts_with(t))
    });
    files.sort_by(|a, b| (&a.module, &a.rel).cmp(&(&b.module, &b.rel)));
    files
}

/// Each strongly connected set of units (Tarjan), with one shortest cycle
/// through its first unit.
fn cycles(edges: &BTreeMap<(String, String), BTreeSet<Site>>) -> Vec<Cycle> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a.as_str()).or_default().push(b.as_str());
        graph.entry(b.as_str()).or_default();
    }
    let mut out = Vec::new();
    for scc in tarjan(&graph) {
        if scc.len() < 2 {
            continue;
        }
        let path = shortest_cycle(&graph, &scc);
        let steps = path
            .windows(2)
            .map(|w| {
                let key = (w[0].to_string(), w[1].to_string());
                let site = edges[&key].iter().next().cloned().expect("an edge's site");
                (key.0, key.1, site)
            })
            .collect();
        out.push(Cycle {
            members: scc.iter().map(|s| s.to_string()).collect(),
            steps,
        });
    }
    out
}

/// Tarjan's strongly connected components, each sorted, in order of their
/// first member.
fn tarjan<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, g: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &g[v] {
            if !s.index.contains_key(w) {
                visit(w, g, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w);
                if w == v {
                    break;
                }
            }
            scc.sort();
            s.out.push(scc);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.out.sort();
    s.out
}

/// A shortest cycle within `scc` through its first unit, as the units
/// along it, first and last the same.
fn shortest_cycle<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>, scc: &[&'a str]) -> Vec<&'a str> {
    let start = scc[0];
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &graph[v] {
            if w == start {
                let mut path = vec![start, v];
                let mut at = v;
                while at != start {
                    at = parent[at];
                    path.push(at);
                }
                path.reverse();
                return path;
            }
            if scc.contains(&w) && !parent.contains_key(w) {
                parent.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

// ---------------------------------------------------------------------------
// The report's text

impl Report {
    /// The report, file names shown under `label` (the crate's directory
    /// from the workspace root).
    pub fn render(&self, label: &str) -> String {
        let file = |rel: &Path| format!("{label}/src/{}", rel.display());
        let site = |s: &Site| format!("{}:{}: {}", file(&s.file), s.line, s.text);
        let mut out = format!(
            "layers of {label} ({label}/layers.txt), lowest first: {}\n",
            self.layers.join(" < ")
        );
        if !self.undeclared.is_empty() {
            let _ = writeln!(
                out,
                "\nundeclared: {} source file(s) in no unit of {label}/layers.txt",
                self.undeclared.len()
            );
            for (rel, module) in &self.undeclared {
                let _ = writeln!(out, "  {}: module {module}", file(rel));
            }
        }
        if !self.upward.is_empty() {
            let _ = writeln!(
                out,
                "\nupward: {} reference(s) from a layer to a higher one",
                self.upward.len()
            );
            for u in &self.upward {
                let _ = writeln!(
                    out,
                    "  {}\n      {} (layer {}) -> {} (layer {})",
                    site(&u.site),
                    u.from,
                    u.from_layer,
                    u.to,
                    u.to_layer
                );
            }
        }
        if !self.cycles.is_empty() {
            let _ = writeln!(out, "\ncycle: {} cycle(s) among units", self.cycles.len());
            for (n, c) in self.cycles.iter().enumerate() {
                let path: Vec<&str> = c
                    .steps
                    .iter()
                    .map(|(a, _, _)| a.as_str())
                    .chain(c.steps.first().map(|(a, _, _)| a.as_str()))
                    .collect();
                let _ = writeln!(
                    out,
                    "  cycle {}: {}\n    {} unit(s) reach each other: {}",
                    n + 1,
                    path.join(" -> "),
                    c.members.len(),
                    c.members.join(" ")
                );
                for (a, b, s) in &c.steps {
                    let _ = writeln!(out, "    {a} -> {b}: {}", site(s));
                }
            }
        }
        if !self.notes.is_empty() {
            out.push_str("\nnotes:\n");
            for n in &self.notes {
                let _ = writeln!(out, "  {n}");
            }
        }
        let _ = writeln!(
            out,
            "\nsummary: {} unit(s) ({} of them undeclared top-level modules) in {} layer(s), \
             {} edge(s) between units; {} violation(s): {} undeclared, {} upward, {} cycle(s)",
            self.units,
            self.provisional,
            self.layers.len(),
            self.edges,
            self.violations(),
            self.undeclared.len(),
            self.upward.len(),
            self.cycles.len()
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(src: &str) -> Vec<(Anchor, String, u32)> {
        scan(src)
            .refs
            .into_iter()
            .map(|r| (r.anchor, r.segs.join("::"), r.line))
            .collect()
    }

    fn paths(src: &str) -> Vec<String> {
        refs(src)
            .into_iter()
            .filter(|(a, _, _)| *a != Anchor::Bare)
            .map(|(a, s, _)| format!("{a:?} {s}"))
            .collect()
    }

    #[test]
    fn nested_use_groups_over_lines() {
        let src = "use crate::a::b::{\n    c,\n    d::{e, f as g},\n    self,\n    h::*,\n};\n";
        let r = refs(src);
        let want = [
            (Anchor::Crate, "a::b::c", 2),
            (Anchor::Crate, "a::b::d::e", 3),
            (Anchor::Crate, "a::b::d::f", 3),
            (Anchor::Crate, "a::b", 4),
            (Anchor::Crate, "a::b::h", 5),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(a, s, l)| (*a, s.to_string(), *l))
            .collect();
        assert_eq!(r, want);
        let s = scan(src);
        assert_eq!(
            s.refs[2].kind,
            RefKind::Use {
                rename: Some("g".into()),
                glob: false
            }
        );
        assert_eq!(s.refs[2].text, "use crate::a::b::d::f as g");
        assert_eq!(s.refs[4].text, "use crate::a::b::h::*");
    }

    #[test]
    fn super_and_self_anchors() {
        let src =
            "use super::x::Y;\nuse super::super::{p, q};\nuse self::z::W;\nuse crate::{r, s::t};";
        assert_eq!(
            paths(src),
            [
                "Super(1) x::Y",
                "Super(2) p",
                "Super(2) q",
                "SelfMod z::W",
                "Crate r",
                "Crate s::t"
            ]
        );
        // Resolved from `a::b::c`: super is a::b, super::super is a.
        let mut tree = Tree::default();
        for m in ["a", "a::b", "a::b::c", "a::b::x", "a::p", "a::b::c::z"] {
            tree.modules
                .insert(m.split("::").map(str::to_string).collect());
        }
        let module: ModPath = vec!["a".into(), "b".into(), "c".into()];
        let got: Vec<String> = scan(src)
            .refs
            .iter()
            .flat_map(|r| tree.resolve(&module, r))
            .map(|(m, _)| show(&m))
            .collect();
        assert_eq!(
            got,
            ["a::b::x", "a::p", "a", "a::b::c::z", "crate", "crate"]
        );
    }

    #[test]
    fn paths_in_code_and_macros() {
        let src = "fn f() {\n    let x = crate::a::b::f(1);\n    crate::kprintln!(\"{}\", x);\n    \
                   super::super::m::T::new();\n    crate::a::B::<u8>::g();\n    $crate::mac::h();\n}\n\
                   pub(in crate::hidden) struct S;\n";
        assert_eq!(
            paths(src),
            [
                "Crate a::b::f",
                "Crate kprintln",
                "Super(2) m::T::new",
                "Crate a::B",
                "Crate mac::h"
            ]
        );
        let s = scan(src);
        assert_eq!(s.refs[1].text, "crate::kprintln!");
        assert_eq!(s.refs[2].line, 4);
    }

    #[test]
    fn comments_and_strings_are_not_paths() {
        let src = r####"
// use crate::line_comment;
/// use crate::doc_comment;
//! crate::inner_doc
/* use crate::block; /* nested crate::nested */ still crate::in_comment */
const S: &str = "use crate::in_string; \" crate::escaped";
const R: &str = r#"crate::raw " crate::still_raw"#;
const B: &[u8] = br##"crate::raw_bytes "# crate::x"##;
const C: char = '"';
const Q: char = '\'';
fn f<'a>(x: &'a str) -> &'a str { let _ = b'"'; x }
use crate::real;
"####;
        assert_eq!(paths(src), ["Crate real"]);
        assert_eq!(refs(src)[0].2, 12);
    }

    #[test]
    fn lifetimes_do_not_open_char_literals() {
        // Read as a char literal, `'a, 'b>` would swallow up to a later `'`.
        let src = "struct P<'a, 'b> { x: &'a u8, y: &'b u8 }\nfn g() -> char { 'x' }\n\
                   fn h<'c>() { let _ = crate::one; 'outer: loop { break 'outer; } }\nuse crate::two;\n\
                   let r#type = crate::three;";
        assert_eq!(paths(src), ["Crate one", "Crate two", "Crate three"]);
    }

    #[test]
    fn test_code_is_skipped() {
        let src = "use crate::kept;\n\
                   #[cfg(test)]\nmod tests {\n    use crate::in_test_mod;\n    fn f() { crate::x::y(); }\n}\n\
                   #[cfg(test)]\npub(crate) mod helpers;\n\
                   #[cfg(test)]\n#[allow(dead_code)]\nfn only_in_tests() { crate::z(); }\n\
                   #[cfg(all(test, feature = \"x\"))]\nuse crate::all_test;\n\
                   #[cfg(not(test))]\nuse crate::not_test;\n\
                   #[cfg(loom)]\nuse crate::loom_kept;\n\
                   struct S {\n    #[cfg(test)]\n    field: crate::t::T,\n    other: crate::kept2::U,\n}\n\
                   fn g() {\n    #[cfg(test)]\n    let _x = crate::skip_stmt;\n    crate::after();\n}\n";
        assert_eq!(
            paths(src),
            [
                "Crate kept",
                "Crate not_test",
                "Crate loom_kept",
                "Crate kept2::U",
                "Crate after"
            ]
        );
        assert_eq!(scan(src).test_mods, [vec!["helpers".to_string()]]);
        assert!(scan("//! doc\n#![cfg(test)]\nuse crate::x;").is_test);
    }

    #[test]
    fn inline_modules_shift_super() {
        let src =
            "mod inner {\n    use super::sibling;\n    use self::deeper::X;\n}\nuse self::after;";
        let s = scan(src);
        assert_eq!(s.refs[0].inline, ["inner"]);
        assert_eq!(s.refs[1].inline, ["inner"]);
        assert!(s.refs[2].inline.is_empty());
    }

    #[test]
    fn modules_of_files() {
        let m = |p: &str| module_of(Path::new(p)).map(|m| show(&m));
        assert_eq!(m("lib.rs").as_deref(), Some("crate"));
        assert_eq!(m("main.rs").as_deref(), Some("crate"));
        assert_eq!(m("a/b.rs").as_deref(), Some("a::b"));
        assert_eq!(m("a/b/mod.rs").as_deref(), Some("a::b"));
        assert_eq!(m("a/lib.rs").as_deref(), Some("a::lib"));
        assert_eq!(m("notes.txt"), None);
    }

    #[test]
    fn declaration_format() {
        let d = parse_decl(
            "# comment\nlayer low: a::* b   # trailing\n\nlayer high: c::d c::e::* arch::x\n",
        )
        .unwrap();
        assert_eq!(d.layers, ["low", "high"]);
        let unit = |m: &str| {
            let m: ModPath = m.split("::").map(str::to_string).collect();
            d.unit_of(&m).map(|u| (u.name, u.layer.unwrap()))
        };
        assert_eq!(unit("a"), Some(("a".into(), 0)));
        assert_eq!(unit("a::k::deep"), Some(("a::k".into(), 0)));
        assert_eq!(unit("b::z"), Some(("b".into(), 0)));
        assert_eq!(unit("c::d::q"), Some(("c::d".into(), 1)));
        assert_eq!(unit("c::e::f::g"), Some(("c::e::f".into(), 1)));
        assert_eq!(unit("c"), None);
        assert_eq!(unit("arch"), None);
        for bad in [
            "",
            "layer x a",
            "layer x:",
            "layer x: a\nlayer x: b",
            "layer x: a a::*",
            "layer x: crate::a",
            "layer x: a-b",
            "lair x: a",
        ] {
            assert!(parse_decl(bad).is_err(), "{bad:?}");
        }
    }

    /// A small crate: `low` < `mid` < `top`, with `mid::*` splitting mid.
    fn demo() -> Vec<(PathBuf, String)> {
        let files = [
            ("lib.rs", "pub mod low;\npub mod mid;\npub mod top;\npub use mid::m1 as m1_alias;\npub const N: usize = 4;\n#[macro_export]\nmacro_rules! say { () => {} }\n"),
            ("low.rs", "//! The bottom.\npub fn f() -> usize { crate::N }\n#[cfg(test)]\nmod tests;\n"),
            ("low/tests.rs", "use crate::top::T;\n"),
            ("mid/mod.rs", "pub mod m1;\npub mod m2;\npub use m1::One;\n"),
            ("mid/m1.rs", "use crate::low;\npub struct One;\npub fn g() { crate::say!(); low::f(); }\n"),
            ("mid/m2.rs", "use super::m1::One;\n#[cfg(test)]\nmod helper;\npub fn h(_: One) {}\n"),
            ("mid/m2/helper.rs", "use crate::top::T;\n"),
            ("top.rs", "use crate::{low, mid::{m1, m2}};\npub struct T;\npub fn run() { crate::mid::m2::h(m1::One); low::f(); }\n"),
        ];
        files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    }

    const DEMO_LAYERS: &str = "layer low: low\nlayer mid: mid::*\nlayer top: top\n";

    fn with(mut files: Vec<(PathBuf, String)>, path: &str, extra: &str) -> Vec<(PathBuf, String)> {
        let f = files
            .iter_mut()
            .find(|(p, _)| p == Path::new(path))
            .expect("demo file");
        f.1.push_str(extra);
        files
    }

    #[test]
    fn a_layered_crate_passes() {
        let r = check(&demo(), DEMO_LAYERS).unwrap();
        assert!(r.is_clean(), "{}", r.render("demo"));
        // top -> low, mid::m1, mid::m2; mid::m1 -> low; mid::m2 -> mid::m1;
        // mid -> mid::m1 (its `pub use`).
        assert_eq!((r.units, r.edges), (5, 6), "{}", r.render("demo"));
        assert!(r.render("demo").contains("0 violation(s)"));
    }

    #[test]
    fn a_back_edge_is_upward() {
        let files = with(demo(), "low.rs", "pub fn back() { crate::top::run(); }\n");
        let r = check(&files, DEMO_LAYERS).unwrap();
        assert_eq!(r.upward.len(), 1, "{}", r.render("demo"));
        let u = &r.upward[0];
        assert_eq!(u.site.file, Path::new("low.rs"));
        assert_eq!(u.site.line, 5);
        assert_eq!(u.site.text, "crate::top::run");
        assert_eq!((u.from.as_str(), u.to.as_str()), ("low", "top"));
        // It closes a cycle too: top -> low -> top.
        assert_eq!(r.cycles.len(), 1);
        let text = r.render("demo");
        assert!(
            text.contains(
                "demo/src/low.rs:5: crate::top::run\n      low (layer low) -> top (layer top)"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_same_layer_cycle_fails() {
        // m1 -> m2 through the parent's re-export, and m2 -> m1 already.
        let files = with(demo(), "mid/m1.rs", "use crate::mid::m2::h;\n");
        let r = check(&files, DEMO_LAYERS).unwrap();
        assert!(r.upward.is_empty());
        assert_eq!(r.cycles.len(), 1, "{}", r.render("demo"));
        let c = &r.cycles[0];
        assert_eq!(c.members, ["mid::m1", "mid::m2"]);
        let steps: Vec<(&str, &str, String)> = c
            .steps
            .iter()
            .map(|(a, b, s)| {
                (
                    a.as_str(),
                    b.as_str(),
                    format!("{}:{}", s.file.display(), s.line),
                )
            })
            .collect();
        assert_eq!(
            steps,
            [
                ("mid::m1", "mid::m2", "mid/m1.rs:4".to_string()),
                ("mid::m2", "mid::m1", "mid/m2.rs:1".to_string())
            ]
        );
        assert!(r
            .render("demo")
            .contains("cycle 1: mid::m1 -> mid::m2 -> mid::m1"));
    }

    #[test]
    fn names_made_by_use_are_followed() {
        // `crate::m1_alias` is lib.rs's name for mid::m1; `low` reaching it
        // is an upward reference, not one to the root.
        let files = with(demo(), "low.rs", "use crate::m1_alias::One;\n");
        let r = check(&files, DEMO_LAYERS).unwrap();
        assert_eq!(r.upward.len(), 1, "{}", r.render("demo"));
        assert_eq!(r.upward[0].to, "mid::m1");
    }

    #[test]
    fn undeclared_files_are_reported() {
        let files = with(demo(), "lib.rs", "pub mod extra;\n");
        let mut files = files;
        files.push(("extra.rs".into(), "use crate::top::T;\n".into()));
        files.push(("extra/sub.rs".into(), String::new()));
        let r = check(&files, DEMO_LAYERS).unwrap();
        let undeclared: Vec<String> = r
            .undeclared
            .iter()
            .map(|(p, m)| format!("{} {m}", p.display()))
            .collect();
        assert_eq!(undeclared, ["extra.rs extra", "extra/sub.rs extra::sub"]);
        assert!(r.upward.is_empty() && r.cycles.is_empty());
        assert_eq!(r.provisional, 1);
    }

    fn real_tree(dir: &str, label: &str) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let report = check_dir(&dir).unwrap();
        assert!(report.is_clean(), "{}", report.render(label));
    }

    #[test]
    fn kernel_tree_is_layered() {
        real_tree("../../kernel", "kernel");
    }

    #[test]
    fn xtask_tree_is_layered() {
        real_tree(".", "tools/xtask");
    }
}

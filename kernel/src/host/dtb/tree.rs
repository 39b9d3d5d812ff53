//! A small flattened-device-tree reader that never panics.
//!
//! [`Tree::new`] checks the whole blob once (header, every token of the
//! structure block, every name, every property's name offset and length,
//! the nesting) and refuses anything malformed with a reason. The accessors
//! then only read what was checked, and still answer `None` rather than
//! index out of range. Content a board may get wrong (a short
//! `#address-cells`, an unterminated string, a `reg` that is not a whole
//! number of entries) reads as absent, so the caller picks a fallback.

const MAGIC: u32 = 0xd00d_feed;
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;
/// Deepest node nesting accepted (real trees use fewer than 8 levels).
pub const MAX_DEPTH: usize = 32;

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let w = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The bytes of the NUL-terminated string at `off` (without the NUL).
fn cstr(b: &[u8], off: usize) -> Option<&[u8]> {
    let rest = b.get(off..)?;
    let len = rest.iter().position(|&c| c == 0)?;
    rest.get(..len)
}

const fn align4(v: usize) -> usize {
    (v + 3) & !3
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    Begin { name: &'a [u8] },
    End,
    Prop { name: &'a [u8], value: &'a [u8] },
    Nop,
    EndTree,
}

/// A checked device tree.
#[derive(Clone, Copy, Debug)]
pub struct Tree<'a> {
    structs: &'a [u8],
    strings: &'a [u8],
}

impl<'a> Tree<'a> {
    /// Checks `blob` and returns the tree, or why it is not one.
    pub fn new(blob: &'a [u8]) -> Result<Tree<'a>, &'static str> {
        let word = |i: usize| be32(blob, i * 4).ok_or("truncated header");
        if word(0)? != MAGIC {
            return Err("bad magic (not a device tree)");
        }
        let total = word(1)? as usize;
        if total < 40 || total > blob.len() {
            return Err("truncated (buffer smaller than header says)");
        }
        let (off_struct, off_strings, off_rsvmap) =
            (word(2)? as usize, word(3)? as usize, word(4)? as usize);
        let (version, last_compat) = (word(5)?, word(6)?);
        let (size_strings, size_struct) = (word(8)? as usize, word(9)? as usize);
        if version < 17 || last_compat > 17 {
            return Err("unsupported version (need 17)");
        }
        let block = |off: usize, len: usize| {
            off.checked_add(len)
                .filter(|&end| end <= total)
                .and_then(|end| blob.get(off..end))
        };
        let (Some(structs), Some(strings), Some(_)) = (
            block(off_struct, size_struct),
            block(off_strings, size_strings),
            block(off_rsvmap, 16),
        ) else {
            return Err("a block lies outside the blob");
        };
        if off_struct % 4 != 0 || off_rsvmap % 8 != 0 {
            return Err("a block lies outside the blob");
        }
        let t = Tree { structs, strings };
        t.check()?;
        Ok(t)
    }

    /// The token at `off` and the offset after it.
    fn token(&self, off: usize) -> Result<(Token<'a>, usize), &'static str> {
        let tag = be32(self.structs, off).ok_or("structure block ends inside a token")?;
        let at = off + 4;
        match tag {
            BEGIN_NODE => {
                let name = cstr(self.structs, at).ok_or("unterminated node name")?;
                Ok((Token::Begin { name }, align4(at + name.len() + 1)))
            }
            END_NODE => Ok((Token::End, at)),
            PROP => {
                let len = be32(self.structs, at).ok_or("truncated property")? as usize;
                let nameoff = be32(self.structs, at + 4).ok_or("truncated property")? as usize;
                let value = at
                    .checked_add(8)
                    .and_then(|s| self.structs.get(s..s.checked_add(len)?))
                    .ok_or("property value runs past the structure block")?;
                let name =
                    cstr(self.strings, nameoff).ok_or("property name outside the strings block")?;
                Ok((Token::Prop { name, value }, align4(at + 8 + len)))
            }
            NOP => Ok((Token::Nop, at)),
            END => Ok((Token::EndTree, at)),
            _ => Err("unknown token in the structure block"),
        }
    }

    /// Walks every token once: one root node, properties before children,
    /// balanced nesting no deeper than [`MAX_DEPTH`], then END.
    fn check(&self) -> Result<(), &'static str> {
        let mut off = 0;
        let mut depth = 0usize;
        let mut seen_root = false;
        // Whether the current node may still have properties.
        let mut props_ok = false;
        loop {
            let (tok, next) = self.token(off)?;
            off = next;
            match tok {
                Token::Nop => {}
                Token::Begin { .. } => {
                    if depth == 0 && seen_root {
                        return Err("more than one root node");
                    }
                    seen_root = true;
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return Err("nodes nested too deep");
                    }
                    props_ok = true;
                }
                Token::Prop { .. } => {
                    if depth == 0 {
                        return Err("a property outside any node");
                    }
                    if !props_ok {
                        return Err("a property after a child node");
                    }
                }
                Token::End => {
                    if depth == 0 {
                        return Err("structure block does not start with the root node");
                    }
                    depth -= 1;
                    props_ok = false;
                }
                Token::EndTree => {
                    if !seen_root {
                        return Err("structure block has no root node");
                    }
                    if depth != 0 {
                        return Err("unbalanced nodes (END before the root closes)");
                    }
                    return Ok(());
                }
            }
        }
    }

    /// The root node.
    pub fn root(&self) -> Node<'a> {
        let mut off = 0;
        // check() proved a BEGIN_NODE comes first after NOPs.
        while let Ok((Token::Nop, next)) = self.token(off) {
            off = next;
        }
        Node::at(*self, off, Cells::DEFAULT)
    }

    /// Every node, depth first (the root first).
    pub fn nodes(&self) -> Nodes<'a> {
        Nodes {
            tree: *self,
            off: 0,
            depth: 0,
            cells: [Cells::DEFAULT; MAX_DEPTH + 1],
        }
    }

    /// The node at `path` (`/cpus`, `/soc/uart@1000`); a component without
    /// a unit address also matches `name@unit`.
    pub fn find(&self, path: &str) -> Option<Node<'a>> {
        let mut node = self.root();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            node = node.children().find(|c| {
                let name = c.name();
                name == part.as_bytes()
                    || (!part.contains('@')
                        && name.split(|&b| b == b'@').next() == Some(part.as_bytes()))
            })?;
        }
        Some(node)
    }

    /// The first node (depth first) with one of the `compatible` strings.
    pub fn find_compatible(&self, with: &[&str]) -> Option<Node<'a>> {
        self.nodes()
            .find(|n| n.compatible().any(|c| with.contains(&c)))
    }

    /// The node whose `phandle` (or `linux,phandle`) is `ph`.
    pub fn find_phandle(&self, ph: u32) -> Option<Node<'a>> {
        self.nodes().find(|n| {
            n.prop_u32("phandle")
                .or_else(|| n.prop_u32("linux,phandle"))
                == Some(ph)
        })
    }

    /// The node a `/chosen`-style path names: a path, or an alias from
    /// `/aliases`; anything after `:` (console options) is ignored.
    pub fn resolve(&self, path: &str) -> Option<Node<'a>> {
        let path = path.split(':').next()?;
        if path.starts_with('/') {
            return self.find(path);
        }
        let target = self.find("/aliases")?.prop_str(path)?;
        target.starts_with('/').then(|| self.find(target))?
    }
}

/// `#address-cells` and `#size-cells` in effect for a node's `reg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cells {
    pub addr: u32,
    pub size: u32,
}

impl Cells {
    /// What the specification says when a parent does not say.
    pub const DEFAULT: Cells = Cells { addr: 2, size: 1 };
}

/// One node of a checked tree.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    tree: Tree<'a>,
    /// Offset of the node's BEGIN_NODE token.
    off: usize,
    /// The parent's cells (how this node's `reg` reads).
    parent_cells: Cells,
}

/// One property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prop<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> Node<'a> {
    fn at(tree: Tree<'a>, off: usize, parent_cells: Cells) -> Node<'a> {
        Node {
            tree,
            off,
            parent_cells,
        }
    }

    /// The node name with its unit address (`cpu@0`; empty for the root).
    pub fn name(&self) -> &'a [u8] {
        match self.tree.token(self.off) {
            Ok((Token::Begin { name }, _)) => name,
            _ => &[],
        }
    }

    fn body(&self) -> usize {
        self.tree
            .token(self.off)
            .map_or(self.tree.structs.len(), |(_, next)| next)
    }

    /// The node's properties.
    pub fn props(&self) -> impl Iterator<Item = Prop<'a>> + 'a {
        let tree = self.tree;
        let mut off = self.body();
        core::iter::from_fn(move || loop {
            let (tok, next) = tree.token(off).ok()?;
            off = next;
            match tok {
                Token::Nop => {}
                Token::Prop { name, value } => return Some(Prop { name, value }),
                _ => return None,
            }
        })
    }

    pub fn prop(&self, name: &str) -> Option<&'a [u8]> {
        self.props()
            .find(|p| p.name == name.as_bytes())
            .map(|p| p.value)
    }

    /// A string property: NUL-terminated UTF-8 (`None` otherwise).
    pub fn prop_str(&self, name: &str) -> Option<&'a str> {
        let v = self.prop(name)?;
        let (last, s) = v.split_last()?;
        if *last != 0 || s.contains(&0) {
            return None;
        }
        core::str::from_utf8(s).ok()
    }

    /// A one-cell property (exactly 4 bytes).
    pub fn prop_u32(&self, name: &str) -> Option<u32> {
        let v = self.prop(name)?;
        (v.len() == 4).then(|| be32(v, 0))?
    }

    /// A one- or two-cell property.
    pub fn prop_u64(&self, name: &str) -> Option<u64> {
        let v = self.prop(name)?;
        match v.len() {
            4 => be32(v, 0).map(u64::from),
            8 => Some(u64::from(be32(v, 0)?) << 32 | u64::from(be32(v, 4)?)),
            _ => None,
        }
    }

    /// The `compatible` strings (empty ones and an unterminated tail skipped).
    pub fn compatible(&self) -> impl Iterator<Item = &'a str> + 'a {
        let v = self.prop("compatible").unwrap_or(&[]);
        // Only NUL-terminated pieces count: drop an unterminated tail.
        let end = v.iter().rposition(|&b| b == 0).map_or(0, |i| i + 1);
        v[..end]
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .filter_map(|s| core::str::from_utf8(s).ok())
    }

    /// The cells this node's children use: its `#address-cells` /
    /// `#size-cells`, each the default when absent or not one cell.
    pub fn cells(&self) -> Cells {
        Cells {
            addr: self
                .prop_u32("#address-cells")
                .unwrap_or(Cells::DEFAULT.addr),
            size: self.prop_u32("#size-cells").unwrap_or(Cells::DEFAULT.size),
        }
    }

    /// Whether `#address-cells` / `#size-cells` are present but not one
    /// 4-byte cell (read as the defaults).
    pub fn bad_cells(&self) -> bool {
        ["#address-cells", "#size-cells"]
            .iter()
            .any(|n| self.prop(n).is_some_and(|v| v.len() != 4))
    }

    /// The `reg` entries as (address, size), with the parent's cells. `None`
    /// without `reg`, or when the cells are more than 2 or the length is not
    /// a whole number of entries.
    pub fn reg(&self) -> Option<impl Iterator<Item = (u64, u64)> + 'a> {
        let Cells { addr, size } = self.parent_cells;
        let v = self.prop("reg")?;
        if addr == 0 || addr > 2 || size > 2 {
            return None;
        }
        let entry = (addr + size) as usize * 4;
        if v.is_empty() || v.len() % entry != 0 {
            return None;
        }
        let read = |b: &[u8], cells: u32| -> u64 {
            (0..cells as usize).fold(0u64, |acc, i| {
                acc << 32 | u64::from(be32(b, i * 4).unwrap_or(0))
            })
        };
        Some(v.chunks_exact(entry).map(move |e| {
            let (a, s) = e.split_at(addr as usize * 4);
            (read(a, addr), read(s, size))
        }))
    }

    /// The direct children.
    pub fn children(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let tree = self.tree;
        let cells = self.cells();
        let mut off = self.body();
        let mut depth = 0usize;
        core::iter::from_fn(move || loop {
            let at = off;
            let (tok, next) = tree.token(off).ok()?;
            off = next;
            match tok {
                Token::Begin { .. } => {
                    depth += 1;
                    if depth == 1 {
                        return Some(Node::at(tree, at, cells));
                    }
                }
                Token::End => {
                    if depth == 0 {
                        return None;
                    }
                    depth -= 1;
                }
                Token::EndTree => return None,
                Token::Nop | Token::Prop { .. } => {}
            }
        })
    }
}

/// Iterator over every node of a tree, depth first.
pub struct Nodes<'a> {
    tree: Tree<'a>,
    off: usize,
    depth: usize,
    /// The cells each open node gives its children (index = depth).
    cells: [Cells; MAX_DEPTH + 1],
}

impl<'a> Iterator for Nodes<'a> {
    type Item = Node<'a>;

    fn next(&mut self) -> Option<Node<'a>> {
        loop {
            let at = self.off;
            let (tok, next) = self.tree.token(self.off).ok()?;
            self.off = next;
            match tok {
                Token::Begin { .. } => {
                    let parent = *self.cells.get(self.depth)?;
                    let node = Node::at(self.tree, at, parent);
                    self.depth += 1;
                    *self.cells.get_mut(self.depth)? = node.cells();
                    return Some(node);
                }
                Token::End => self.depth = self.depth.saturating_sub(1),
                Token::EndTree => return None,
                Token::Nop | Token::Prop { .. } => {}
            }
        }
    }
}

//! A VM's terminal output, filtered before it reaches the operator's
//! terminal ([`TermFilter`]).
//!
//! A VM with the keyboard (raw console mode, `crate::vmm::console`) writes to
//! the operator's real terminal. Left untouched, its bytes could do far
//! more than draw on the screen: set the operator's clipboard and read it
//! back (OSC 52), retitle the window, make the terminal answer queries as
//! if typed (cursor position, device attributes, window title reports:
//! answers that land in whichever VM has the keyboard by then), turn on
//! mouse or focus reporting or a keyboard protocol that changes what
//! Ctrl-] sends, hide text (SGR 8), or send strings to the terminal itself
//! (DCS, APC: tmux pass-through, graphics). The filter lets through what
//! shells, `vi`, `top` and `less` need and nothing else.
//!
//! # The parser
//!
//! A byte-at-a-time state machine after the DEC VT500-series parser
//! (ground, escape, escape intermediate, CSI entry / parameter /
//! intermediate / ignore, OSC string, DCS entry / parameter / intermediate
//! / pass-through / ignore, SOS/PM/APC string), with:
//!
//! - 8-bit C1 controls (0x80-0x9f: 0x9b CSI, 0x9d OSC, 0x90 DCS, 0x9c ST,
//!   0x98/0x9e/0x9f SOS/PM/APC ...) acting as `ESC` + the byte less 0x40,
//!   from any state;
//! - UTF-8 decoded in the ground state, so the bytes 0x80-0xbf inside a
//!   multibyte character are continuation bytes, not C1 controls; a C1
//!   control written as UTF-8 (U+0080-U+009F) is a control, as a UTF-8
//!   terminal takes it; malformed UTF-8 becomes U+FFFD. Inside control
//!   strings continuation bytes are tracked too (0x9c inside a character
//!   of an OSC does not end it);
//! - CAN and SUB cancelling a sequence, ESC starting a new one from any
//!   state (so `ESC \` ends a string).
//!
//! Its state is bounded and fixed: the parameters of a control sequence
//! are parsed as numbers (at most [`MAX_PARAMS`], each saturating), never
//! kept as bytes; a sequence with more parameters or intermediates than
//! that is consumed to its end and dropped. Control strings (OSC, DCS,
//! SOS, PM, APC) are never stored at all: they are consumed and dropped
//! however long they are. No allocation, ever.
//!
//! # What comes out
//!
//! The filter never forwards the VM's bytes for a control: it writes its
//! own canonical form of each sequence it allows (7-bit `ESC [`, the
//! parameters as decimal numbers), and only complete units: a whole
//! character, a whole sequence, a single control. Between two calls of
//! [`TermFilter::push`] the terminal is therefore always in its ground
//! state, so what kestrel writes next (its reset, its notices) is read as
//! kestrel wrote it, and a sequence the VM leaves open stays inside the
//! filter.
//!
//! Allowed:
//!
//! - text: printable ASCII and UTF-8 characters from U+00A0;
//! - C0 controls BEL, BS, HT, LF, CR, SO, SI;
//! - `ESC 7`, `ESC 8` (save and restore the cursor), `ESC D`, `ESC E`,
//!   `ESC M` (index, next line, reverse index), `ESC =` / `ESC >`
//!   (application / normal keypad), `ESC (` and `ESC )` with `B`, `0` or
//!   `A` (character sets);
//! - CSI cursor movement and editing: `@ A B C D E F G H I J K L M P S T X
//!   Z ` a b d e f` (one parameter, two for `H` and `f`; not `CSI 3 J`,
//!   which erases the terminal's scrollback, kestrel's notices with it),
//!   `r` (scroll region), `s` / `u` without parameters (save / restore
//!   the cursor), `SP q` (cursor shape), `h` / `l` of mode 4 (insert);
//! - SGR (`CSI ... m`): bold, dim, italic, underline (also `4:0`-`4:4`),
//!   reverse, strike-through, overline, their resets, and the 8, 16, 256
//!   and 24-bit colours (colon forms rewritten with semicolons). **Not**
//!   8 (concealed: text the operator cannot see) nor 5 and 6 (blink,
//!   which kestrel keeps for marking its own notices, `crate::vmm::console`);
//!   a sequence left with nothing is dropped;
//! - the DEC private modes a full-screen program needs: `?1` (cursor
//!   keys), `?7` (autowrap), `?25` (cursor visible), `?47`, `?1047`,
//!   `?1048`, `?1049` (alternate screen, saved cursor), `?66` (keypad),
//!   `?2004` (bracketed paste). The filter remembers which of them the VM
//!   turned on ([`Modes`]) so kestrel can undo them
//!   ([`TermFilter::write_reset`]) and set them again
//!   ([`TermFilter::write_restore`]).
//!
//! Dropped: every OSC (titles, clipboard set and query, hyperlinks, colour
//! and palette changes and queries), DCS (DECRQSS, tmux pass-through,
//! sixel), SOS, PM, APC; every query (DSR `CSI 5 n` / `6 n` / `? 6 n`, DA
//! `CSI c` / `> c` / `= c`, DECRQM `CSI ? ... $ p`, window operations and
//! reports `CSI ... t`, DECREQTPARM, `ESC Z`) and ENQ (answerback); mouse,
//! focus and other reporting modes (`?9`, `?1000`-`?1006`, `?1015`,
//! `?1016`), keyboard protocols (`CSI > ...`, `CSI = ...`, `CSI < ...`:
//! modifyOtherKeys and the kitty protocol would change what Ctrl-] sends),
//! full and soft resets, 8-bit-control mode, tab-stop changes, conformance
//! levels, rectangle operations, selective erase, and anything else.
//! Colours are not restricted: a VM can still write dark grey on black.

use alloc::vec::Vec;

/// Most parameters a control sequence may have; one with more is dropped.
pub const MAX_PARAMS: usize = 32;

/// A parameter with no digits (`CSI ;5H`'s first).
const EMPTY: u16 = u16::MAX;
/// The largest parameter value kept (larger ones saturate).
const MAX_VALUE: u16 = u16::MAX - 1;
/// U+FFFD, for malformed UTF-8.
const REPLACEMENT: &[u8] = "\u{fffd}".as_bytes();

/// The fixed part of kestrel's terminal reset: default rendition, cursor
/// visible, autowrap on, replace mode, normal cursor keys and keypad, no
/// bracketed paste, no mouse or focus reporting, ASCII in G0 and G1 with
/// G0 selected.
pub const RESET: &[u8] = b"\x1b[0m\x1b[?25h\x1b[?7h\x1b[4l\x1b[?1l\x1b>\x1b[?2004l\
\x1b[?9;1000;1001;1002;1003;1004;1005;1006;1015;1016l\x1b(B\x1b)B\x0f";

/// Where the filtered bytes go.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// The terminal modes a VM's output turned on (as the filter let them
/// through), which kestrel undoes before it speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    /// The alternate screen, and the mode that entered it (47, 1047, 1049).
    pub alt_screen: Option<u16>,
    /// Application cursor keys (`?1`).
    pub cursor_keys: bool,
    /// Application keypad (`ESC =`, `?66`).
    pub keypad: bool,
    /// Bracketed paste (`?2004`).
    pub bracketed_paste: bool,
    /// The cursor hidden (`?25 l`).
    pub cursor_hidden: bool,
    /// Autowrap off (`?7 l`).
    pub no_autowrap: bool,
    /// Insert mode (`4 h`).
    pub insert: bool,
    /// A scroll region: its top and bottom parameters as given.
    pub region: Option<(u16, u16)>,
    /// The cursor shape (`CSI n SP q`), 0 for the terminal's default.
    pub cursor_shape: u16,
}

/// The parser's states (the VT500 parser's, less the ones it merges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    EscapeIntermediate,
    CsiEntry,
    CsiParam,
    CsiIntermediate,
    CsiIgnore,
    OscString,
    DcsEntry,
    DcsParam,
    DcsIntermediate,
    DcsPassthrough,
    DcsIgnore,
    SosPmApcString,
}

impl State {
    /// A control string, whose bytes are consumed and dropped.
    fn is_string(self) -> bool {
        matches!(
            self,
            State::OscString
                | State::DcsEntry
                | State::DcsParam
                | State::DcsIntermediate
                | State::DcsPassthrough
                | State::DcsIgnore
                | State::SosPmApcString
        )
    }
}

/// The terminal-output filter of one VM (see the module's documentation).
#[derive(Clone, Debug)]
pub struct TermFilter {
    state: State,
    /// A UTF-8 character being decoded (ground state).
    utf8: [u8; 4],
    utf8_len: u8,
    utf8_need: u8,
    /// Continuation bytes still expected inside a control string, and
    /// whether its character began with 0xc2 (U+0080-U+00BF).
    string_need: u8,
    string_c2: bool,
    /// The private marker of a CSI (`<`, `=`, `>`, `?`), or 0.
    private: u8,
    /// Intermediate bytes: the first two, and how many there were.
    inter: [u8; 2],
    ninter: u8,
    /// The parameters so far; bit i of `subs`: parameter i followed a `:`.
    params: [u16; MAX_PARAMS],
    subs: u32,
    nparams: u8,
    /// The parameter being read, whether it follows a `:`, and whether
    /// the sequence has parameter bytes at all.
    cur: u16,
    cur_sub: bool,
    any_param: bool,
    modes: Modes,
}

impl Default for TermFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl TermFilter {
    /// A filter in the ground state with the terminal's default modes.
    pub const fn new() -> Self {
        TermFilter {
            state: State::Ground,
            utf8: [0; 4],
            utf8_len: 0,
            utf8_need: 0,
            string_need: 0,
            string_c2: false,
            private: 0,
            inter: [0; 2],
            ninter: 0,
            params: [0; MAX_PARAMS],
            subs: 0,
            nparams: 0,
            cur: EMPTY,
            cur_sub: false,
            any_param: false,
            modes: Modes {
                alt_screen: None,
                cursor_keys: false,
                keypad: false,
                bracketed_paste: false,
                cursor_hidden: false,
                no_autowrap: false,
                insert: false,
                region: None,
                cursor_shape: 0,
            },
        }
    }

    /// The modes the VM's output turned on.
    pub fn modes(&self) -> Modes {
        self.modes
    }

    /// Whether no sequence or character is half read.
    pub fn is_ground(&self) -> bool {
        self.state == State::Ground && self.utf8_need == 0
    }

    /// Forgets a half-read sequence or character (bytes before it were
    /// lost), keeping the modes.
    pub fn abort(&mut self) {
        self.state = State::Ground;
        self.utf8_need = 0;
        self.utf8_len = 0;
    }

    /// One byte of the VM's output: what may reach the terminal goes to
    /// `out`, in complete units.
    pub fn push(&mut self, b: u8, out: &mut impl Sink) {
        if self.utf8_need > 0 {
            if self.continues_utf8(b) {
                self.utf8[usize::from(self.utf8_len)] = b;
                self.utf8_len += 1;
                self.utf8_need -= 1;
                if self.utf8_need == 0 {
                    self.finish_char(out);
                }
                return;
            }
            // Malformed: the character so far is replaced, and `b` stands
            // on its own.
            self.utf8_need = 0;
            self.utf8_len = 0;
            out.put(REPLACEMENT);
        }
        match b {
            // Cancel, from any state.
            0x18 | 0x1a => self.state = State::Ground,
            0x1b => self.enter_escape(),
            0x80..=0xff => self.high(b, out),
            _ => self.seven_bit(b, out),
        }
    }

    /// Whether `b` is the next byte of the UTF-8 character being decoded.
    fn continues_utf8(&self, b: u8) -> bool {
        if !(0x80..=0xbf).contains(&b) {
            return false;
        }
        if self.utf8_len != 1 {
            return true;
        }
        // The second byte rules out overlong forms, surrogates and code
        // points past U+10FFFF.
        match self.utf8[0] {
            0xe0 => b >= 0xa0,
            0xed => b <= 0x9f,
            0xf0 => b >= 0x90,
            0xf4 => b <= 0x8f,
            _ => true,
        }
    }

    /// A whole UTF-8 character: text, or a C1 control written as UTF-8.
    fn finish_char(&mut self, out: &mut impl Sink) {
        let len = usize::from(self.utf8_len);
        self.utf8_len = 0;
        if len == 2 && self.utf8[0] == 0xc2 && self.utf8[1] <= 0x9f {
            // U+0080-U+009F: a UTF-8 terminal takes these as C1 controls.
            self.c1(self.utf8[1], out);
        } else {
            out.put(&self.utf8[..len]);
        }
    }

    /// A byte from 0x80 (no character being decoded).
    fn high(&mut self, b: u8, out: &mut impl Sink) {
        let state = self.state;
        if state.is_string() {
            if self.string_need > 0 && b <= 0xbf {
                self.string_need -= 1;
                if self.string_c2 && b <= 0x9f {
                    // A C1 control written as UTF-8 (ST ends the string).
                    return self.c1(b, out);
                }
                return;
            }
            self.string_c2 = b == 0xc2;
            self.string_need = match b {
                0x80..=0x9f => return self.c1(b, out),
                0xc2..=0xdf => 1,
                0xe0..=0xef => 2,
                0xf0..=0xf4 => 3,
                _ => 0,
            };
            return;
        }
        if b <= 0x9f {
            return self.c1(b, out);
        }
        match state {
            State::Ground => {
                let need = match b {
                    0xc2..=0xdf => 1,
                    0xe0..=0xef => 2,
                    0xf0..=0xf4 => 3,
                    _ => return out.put(REPLACEMENT),
                };
                self.utf8[0] = b;
                self.utf8_len = 1;
                self.utf8_need = need;
            }
            // Not part of any sequence: it ends the escape, and is read
            // again as text.
            State::Escape | State::EscapeIntermediate => {
                self.state = State::Ground;
                self.high(b, out);
            }
            _ => self.state = State::CsiIgnore,
        }
    }

    /// An 8-bit C1 control: `ESC` and the byte less 0x40.
    fn c1(&mut self, b: u8, out: &mut impl Sink) {
        self.enter_escape();
        self.escape_byte(b - 0x40, out);
    }

    fn enter_escape(&mut self) {
        self.state = State::Escape;
        self.ninter = 0;
    }

    fn enter_csi(&mut self) {
        self.state = State::CsiEntry;
        self.private = 0;
        self.ninter = 0;
        self.nparams = 0;
        self.subs = 0;
        self.cur = EMPTY;
        self.cur_sub = false;
        self.any_param = false;
    }

    fn enter_string(&mut self, state: State) {
        self.state = state;
        self.string_need = 0;
    }

    fn collect(&mut self, b: u8) {
        if let Some(slot) = self.inter.get_mut(usize::from(self.ninter)) {
            *slot = b;
        }
        self.ninter = self.ninter.saturating_add(1);
    }

    /// A C0 control outside a string: the few a terminal session needs.
    fn execute(b: u8, out: &mut impl Sink) {
        // BEL, BS, HT, LF, CR, SO, SI.
        if matches!(b, 0x07..=0x0a | 0x0d..=0x0f) {
            out.put(&[b]);
        }
    }

    /// A byte below 0x80 other than CAN, SUB and ESC.
    fn seven_bit(&mut self, b: u8, out: &mut impl Sink) {
        match self.state {
            State::Ground => match b {
                0x20..=0x7e => out.put(&[b]),
                0x7f => {}
                _ => Self::execute(b, out),
            },
            State::Escape => self.escape_byte(b, out),
            State::EscapeIntermediate => match b {
                0x00..=0x1f => Self::execute(b, out),
                0x20..=0x2f => self.collect(b),
                0x30..=0x7e => self.esc_dispatch(b, out),
                _ => {}
            },
            State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore => {
                self.csi_byte(b, out)
            }
            State::OscString => {
                // BEL ends an OSC as ST does (xterm).
                if b == 0x07 {
                    self.state = State::Ground;
                }
            }
            State::DcsEntry | State::DcsParam | State::DcsIntermediate => {
                let state = self.state;
                self.state = match b {
                    0x00..=0x1f | 0x7f => state,
                    0x20..=0x2f => State::DcsIntermediate,
                    0x30..=0x39 | 0x3b if state != State::DcsIntermediate => State::DcsParam,
                    0x3c..=0x3f if state == State::DcsEntry => State::DcsParam,
                    0x30..=0x3f => State::DcsIgnore,
                    _ => State::DcsPassthrough,
                };
            }
            State::DcsPassthrough | State::DcsIgnore | State::SosPmApcString => {}
        }
    }

    /// The byte after `ESC` (or a C1 control's equivalent).
    fn escape_byte(&mut self, b: u8, out: &mut impl Sink) {
        match b {
            0x00..=0x1f => Self::execute(b, out),
            0x20..=0x2f => {
                self.collect(b);
                self.state = State::EscapeIntermediate;
            }
            b'[' => self.enter_csi(),
            b']' => self.enter_string(State::OscString),
            b'P' => self.enter_string(State::DcsEntry),
            b'X' | b'^' | b'_' => self.enter_string(State::SosPmApcString),
            // ST on its own.
            b'\\' => self.state = State::Ground,
            0x30..=0x7e => self.esc_dispatch(b, out),
            _ => {}
        }
    }

    /// A complete escape sequence: `ESC`, the intermediates, `f`.
    fn esc_dispatch(&mut self, f: u8, out: &mut impl Sink) {
        self.state = State::Ground;
        match (self.ninter, self.inter[0], f) {
            (0, _, b'7' | b'8' | b'D' | b'E' | b'M') => out.put(&[0x1b, f]),
            (0, _, b'=' | b'>') => {
                self.modes.keypad = f == b'=';
                out.put(&[0x1b, f]);
            }
            (1, i @ (b'(' | b')'), b'B' | b'0' | b'A') => out.put(&[0x1b, i, f]),
            _ => {}
        }
    }

    /// A byte of a control sequence (below 0x80).
    fn csi_byte(&mut self, b: u8, out: &mut impl Sink) {
        let state = self.state;
        match b {
            0x00..=0x1f => Self::execute(b, out),
            0x7f => {}
            _ if state == State::CsiIgnore => {
                if (0x40..=0x7e).contains(&b) {
                    self.state = State::Ground;
                }
            }
            0x20..=0x2f => {
                self.collect(b);
                self.state = State::CsiIntermediate;
            }
            b'0'..=b'9' | b';' | b':' if state != State::CsiIntermediate => self.param(b),
            0x3c..=0x3f if state == State::CsiEntry => {
                self.private = b;
                self.state = State::CsiParam;
            }
            0x30..=0x3f => self.state = State::CsiIgnore,
            _ => self.csi_dispatch(b, out),
        }
    }

    /// A parameter byte: a digit or a separator.
    fn param(&mut self, b: u8) {
        self.state = State::CsiParam;
        self.any_param = true;
        if b.is_ascii_digit() {
            let d = u32::from(b - b'0');
            self.cur = match self.cur {
                EMPTY => d as u16,
                v => (u32::from(v) * 10 + d).min(u32::from(MAX_VALUE)) as u16,
            };
        } else if self.end_param() {
            self.cur_sub = b == b':';
        } else {
            self.state = State::CsiIgnore;
        }
    }

    /// Ends the parameter being read; false if there are too many.
    fn end_param(&mut self) -> bool {
        let n = usize::from(self.nparams);
        if n >= MAX_PARAMS {
            return false;
        }
        self.params[n] = self.cur;
        if self.cur_sub {
            self.subs |= 1 << n;
        }
        self.nparams += 1;
        self.cur = EMPTY;
        self.cur_sub = false;
        true
    }

    /// A complete control sequence with final byte `f`: written again in
    /// its canonical form if the policy allows it, else dropped.
    fn csi_dispatch(&mut self, f: u8, out: &mut impl Sink) {
        self.state = State::Ground;
        if self.any_param && !self.end_param() {
            return;
        }
        let n = usize::from(self.nparams);
        let params = self.params;
        let p = &params[..n];
        let has_subs = self.subs != 0;
        let first = p.first().copied().unwrap_or(EMPTY);
        match (self.private, self.ninter, f) {
            (0, 0, b'm') => Self::sgr(p, self.subs, out),
            _ if has_subs || self.ninter > 1 => {}
            // Erasing the scrollback would erase kestrel's notices in it.
            (0, 0, b'J') if first == 3 => {}
            (
                0,
                0,
                b'@'
                | b'A'..=b'G'
                | b'I'..=b'M'
                | b'P'
                | b'S'
                | b'T'
                | b'X'
                | b'Z'
                | b'`'
                | b'a'
                | b'b'
                | b'd'
                | b'e',
            ) if n <= 1 => write_csi(0, p, None, f, out),
            (0, 0, b'H' | b'f') if n <= 2 => write_csi(0, p, None, f, out),
            (0, 0, b'r') if n <= 2 => {
                self.modes.region = match p {
                    [] | [EMPTY] | [EMPTY, EMPTY] => None,
                    [t] => Some((*t, EMPTY)),
                    [t, b, ..] => Some((*t, *b)),
                };
                write_csi(0, p, None, f, out);
            }
            (0, 0, b's' | b'u') if n == 0 => write_csi(0, p, None, f, out),
            (0, 0, b'h' | b'l') => {
                for &m in p.iter().filter(|&&m| m == 4) {
                    self.modes.insert = f == b'h';
                    write_csi(0, &[m], None, f, out);
                }
            }
            (b'?', 0, b'h' | b'l') => {
                for &m in p {
                    if self.private_mode(m, f == b'h') {
                        write_csi(b'?', &[m], None, f, out);
                    }
                }
            }
            (0, 1, b'q') if self.inter[0] == b' ' && n <= 1 && (first == EMPTY || first <= 6) => {
                self.modes.cursor_shape = if first == EMPTY { 0 } else { first };
                write_csi(0, p, Some(b' '), f, out);
            }
            _ => {}
        }
    }

    /// DEC private mode `m` set (`on`) or reset: whether it is allowed,
    /// noting what it turns on.
    fn private_mode(&mut self, m: u16, on: bool) -> bool {
        let modes = &mut self.modes;
        match m {
            1 => modes.cursor_keys = on,
            7 => modes.no_autowrap = !on,
            25 => modes.cursor_hidden = !on,
            47 | 1047 | 1049 if on => {
                modes.alt_screen.get_or_insert(m);
            }
            47 | 1047 | 1049 => modes.alt_screen = None,
            1048 => {}
            66 => modes.keypad = on,
            2004 => modes.bracketed_paste = on,
            _ => return false,
        }
        true
    }

    /// SGR: the allowed attributes of `p`, written again; concealed and
    /// blink left out.
    fn sgr(p: &[u16], subs: u32, out: &mut impl Sink) {
        let is_sub = |i: usize| subs & (1 << i) != 0;
        let mut keep = [0u16; MAX_PARAMS];
        let mut keep_sub = 0u32;
        let mut k = 0;
        let mut add = |v: u16, sub: bool, k: &mut usize| {
            keep[*k] = v;
            if sub {
                keep_sub |= 1 << *k;
            }
            *k += 1;
        };
        let mut i = 0;
        while i < p.len() {
            // The parameter and its `:` sub-parameters.
            let mut j = i + 1;
            while j < p.len() && is_sub(j) {
                j += 1;
            }
            let v = p[i];
            if is_sub(i) {
                // A sub-parameter with nothing before it.
                i = j;
                continue;
            }
            if j > i + 1 {
                let group = &p[i + 1..j];
                match (v, group) {
                    // Colours in the colon form: written with semicolons
                    // (a terminal not knowing `:` reads them the same).
                    (38 | 48 | 58, [5, n]) => {
                        for x in [v, 5, *n] {
                            add(x, false, &mut k);
                        }
                    }
                    (38 | 48 | 58, [2, r, g, b] | [2, _, r, g, b]) => {
                        for x in [v, 2, *r, *g, *b] {
                            add(x, false, &mut k);
                        }
                    }
                    // Underline styles (curly, dotted ...): none of them
                    // reads as blink or concealed even without `:`.
                    (4, [s]) if *s == EMPTY || *s <= 4 => {
                        add(4, false, &mut k);
                        add(*s, true, &mut k);
                    }
                    _ => {}
                }
                i = j;
                continue;
            }
            match v {
                38 | 48 | 58 => {
                    // Extended colour: 5;n or 2;r;g;b, all plain parameters.
                    let len = match p.get(i + 1) {
                        Some(5) => 3,
                        Some(2) => 5,
                        _ => 0,
                    };
                    if len == 0 || i + len > p.len() || (i + 1..i + len).any(is_sub) {
                        // Malformed: the rest is not trusted.
                        break;
                    }
                    for &x in &p[i..i + len] {
                        add(x, false, &mut k);
                    }
                    i += len;
                    continue;
                }
                EMPTY
                | 0..=4
                | 7
                | 9
                | 21..=25
                | 27..=37
                | 39..=47
                | 49
                | 53
                | 55
                | 59
                | 90..=97
                | 100..=107 => add(v, false, &mut k),
                // 5, 6 (blink), 8 (concealed) and the unknown.
                _ => {}
            }
            i += 1;
        }
        if p.is_empty() {
            write_csi(0, &[], None, b'm', out);
        } else if k > 0 {
            write_sgr(&keep[..k], keep_sub, out);
        }
    }

    /// What kestrel writes before it speaks: [`RESET`], and first (when
    /// `undo`: the terminal still has them) the undoing of this VM's modes
    /// that the fixed part does not cover: its alternate screen left, its
    /// scroll region cleared (the cursor kept), its cursor shape back to
    /// the default.
    pub fn write_reset(&self, undo: bool, out: &mut impl Sink) {
        let m = &self.modes;
        if undo {
            if let Some(alt) = m.alt_screen {
                write_csi(b'?', &[alt], None, b'l', out);
            }
            if m.region.is_some() {
                out.put(b"\x1b7\x1b[r\x1b8");
            }
        }
        out.put(RESET);
        if undo && m.cursor_shape != 0 {
            out.put(b"\x1b[0 q");
        }
    }

    /// The VM's modes set again after a reset (when its output resumes).
    pub fn write_restore(&self, out: &mut impl Sink) {
        let m = &self.modes;
        if let Some(alt) = m.alt_screen {
            write_csi(b'?', &[alt], None, b'h', out);
        }
        if let Some((t, b)) = m.region {
            out.put(b"\x1b7");
            write_csi(0, &[t, b], None, b'r', out);
            out.put(b"\x1b8");
        }
        for (on, mode) in [
            (m.cursor_hidden, 25),
            (m.no_autowrap, 7),
            (m.cursor_keys, 1),
            (m.bracketed_paste, 2004),
        ] {
            if on {
                let f = if mode == 1 || mode == 2004 {
                    b'h'
                } else {
                    b'l'
                };
                write_csi(b'?', &[mode], None, f, out);
            }
        }
        if m.insert {
            out.put(b"\x1b[4h");
        }
        if m.keypad {
            out.put(b"\x1b=");
        }
        if m.cursor_shape != 0 {
            write_csi(0, &[m.cursor_shape], Some(b' '), b'q', out);
        }
    }
}

/// Writes `ESC [`, `private`, the parameters `p` separated by `;`
/// (a parameter with bit i of `subs` by `:`), `inter`, `f`.
fn write_params(private: u8, p: &[u16], subs: u32, inter: Option<u8>, f: u8, out: &mut impl Sink) {
    // 3 + 32 parameters of at most 6 bytes + 2.
    let mut buf = [0u8; 8 + MAX_PARAMS * 6];
    let mut n = 0;
    let mut put = |b: u8| {
        buf[n] = b;
        n += 1;
    };
    put(0x1b);
    put(b'[');
    if private != 0 {
        put(private);
    }
    for (i, &v) in p.iter().enumerate() {
        if i > 0 {
            put(if subs & (1 << i) != 0 { b':' } else { b';' });
        }
        if v != EMPTY {
            let mut digits = [0u8; 5];
            let mut d = 0;
            let mut x = v;
            loop {
                digits[d] = b'0' + (x % 10) as u8;
                d += 1;
                x /= 10;
                if x == 0 {
                    break;
                }
            }
            for &c in digits[..d].iter().rev() {
                put(c);
            }
        }
    }
    if let Some(i) = inter {
        put(i);
    }
    put(f);
    out.put(&buf[..n]);
}

fn write_csi(private: u8, p: &[u16], inter: Option<u8>, f: u8, out: &mut impl Sink) {
    write_params(private, p, 0, inter, f, out);
}

fn write_sgr(p: &[u16], subs: u32, out: &mut impl Sink) {
    write_params(0, p, subs, None, b'm', out);
}

/// A check of filtered output written apart from the filter (tests of
/// the filter and of the console).
#[cfg(test)]
pub(crate) mod checker {
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// Checks that `out` is only what the policy allows, in complete
    /// units: written apart from the filter, so it checks the filter.
    pub(crate) fn check(out: &[u8]) -> Result<(), String> {
        let mut i = 0;
        while i < out.len() {
            let b = out[i];
            match b {
                0x20..=0x7e | 0x07..=0x0a | 0x0d..=0x0f => i += 1,
                0x1b => i += check_escape(&out[i..])?,
                0x80..=0xff => {
                    let len = match b {
                        0xc2..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf4 => 4,
                        _ => return Err(format!("a stray byte {b:#x} at {i}")),
                    };
                    let ch = out
                        .get(i..i + len)
                        .and_then(|s| core::str::from_utf8(s).ok())
                        .ok_or_else(|| format!("bad UTF-8 at {i}: {:x?}", &out[i..]))?;
                    if ch.chars().next().is_some_and(|c| (c as u32) < 0xa0) {
                        return Err(format!("a C1 control in UTF-8 at {i}"));
                    }
                    i += len;
                }
                _ => return Err(format!("control {b:#x} at {i}")),
            }
        }
        Ok(())
    }

    /// One escape sequence at the start of `s`: its length, if allowed.
    fn check_escape(s: &[u8]) -> Result<usize, String> {
        let bad = || format!("not allowed: {:?}", String::from_utf8_lossy(s));
        match s.get(1).copied().ok_or_else(bad)? {
            b'7' | b'8' | b'=' | b'>' | b'D' | b'E' | b'M' => return Ok(2),
            b'(' | b')' if matches!(s.get(2), Some(b'B' | b'0' | b'A')) => return Ok(3),
            b'[' => {}
            _ => return Err(bad()),
        }
        let end = s
            .iter()
            .position(|b| (0x40..=0x7e).contains(b) && *b != b'[')
            .ok_or_else(bad)?;
        let body = core::str::from_utf8(&s[2..end]).map_err(|_| bad())?;
        let f = s[end];
        let (private, body) = match body.strip_prefix('?') {
            Some(rest) => (true, rest),
            None => (false, body),
        };
        let (body, space) = match body.strip_suffix(' ') {
            Some(rest) => (rest, true),
            None => (body, false),
        };
        if !body
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b';' || b == b':')
        {
            return Err(bad());
        }
        let nums: Vec<Option<u32>> = body.split([';', ':']).map(|x| x.parse().ok()).collect();
        let ok = match (private, space, f) {
            (true, false, b'h' | b'l') => matches!(
                nums.as_slice(),
                [Some(1 | 7 | 25 | 47 | 1047 | 1048 | 1049 | 66 | 2004)]
            ),
            (false, true, b'q') => nums.len() == 1,
            (false, false, b'm') => sgr_ok(body),
            (false, false, b'J') => nums.len() == 1 && nums[0] != Some(3),
            (false, false, b'h' | b'l') => nums == [Some(4)],
            (false, false, b's' | b'u') => body.is_empty(),
            (false, false, b'H' | b'f' | b'r') => nums.len() <= 2,
            (false, false, b'@' | b'A'..=b'G' | b'I' | b'K' | b'L' | b'M' | b'P' | b'S')
            | (false, false, b'T' | b'X' | b'Z' | b'`' | b'a' | b'b' | b'd' | b'e') => {
                nums.len() == 1
            }
            _ => false,
        };
        if !ok {
            return Err(bad());
        }
        Ok(end + 1)
    }

    /// SGR parameters free of blink and concealed, read as a terminal
    /// that knows no `:` would.
    fn sgr_ok(body: &str) -> bool {
        let v: Vec<u32> = body
            .split([';', ':'])
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let mut i = 0;
        while i < v.len() {
            match v[i] {
                38 | 48 | 58 if v.get(i + 1) == Some(&5) => i += 3,
                38 | 48 | 58 if v.get(i + 1) == Some(&2) => i += 5,
                5 | 6 | 8 => return false,
                _ => i += 1,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::checker::check;
    use super::*;
    use alloc::string::String;
    use alloc::vec;

    /// `input` through a fresh filter, one byte at a time.
    fn filter(input: &[u8]) -> Vec<u8> {
        let mut f = TermFilter::new();
        let mut out = Vec::new();
        for &b in input {
            f.push(b, &mut out);
        }
        out
    }

    fn f(input: &str) -> String {
        String::from_utf8(filter(input.as_bytes())).unwrap()
    }

    #[test]
    fn the_checker_rejects_what_the_filter_must_drop() {
        for bad in [
            &b"\x1b[8m"[..],
            b"\x1b[1;5m",
            b"\x1b[4:8m",
            b"\x1b]0;x\x07",
            b"\x1b]52;c;?\x1b\\",
            b"\x1bP$qm\x1b\\",
            b"\x1b_x\x1b\\",
            b"\x1b[6n",
            b"\x1b[c",
            b"\x1b[>c",
            b"\x1b[3J",
            b"\x1b[?1000h",
            b"\x1b[?1049;1000h",
            b"\x1b[14t",
            b"\x1bc",
            b"\x9b6n",
            b"\xc2\x9b6n",
            b"\x05",
            b"\x1b[1",
            b"\xe2\x82",
        ] {
            assert!(check(bad).is_err(), "{bad:x?}");
        }
        check(b"a\x1b[1;31m\x1b[?1049h\x1b(0q\x1b(B\xe2\x82\xac\r\n").unwrap();
    }

    fn checked(input: &[u8]) -> Vec<u8> {
        let out = filter(input);
        if let Err(e) = check(&out) {
            panic!("{e} in the output of {:?}", String::from_utf8_lossy(input));
        }
        out
    }

    #[test]
    fn text_utf8_and_the_usual_controls_pass() {
        let s = "hello, w\u{f6}rld \u{20ac} \u{1f600} \u{a0}\t\r\n\x08\x07\x0e\x0f";
        assert_eq!(f(s), s);
        // Continuation bytes from 0x80 to 0x9f are not C1 controls.
        let tricky = "\u{41b}\u{2701}\u{271c}\u{1f49b}\u{10ffff}";
        assert!(tricky.bytes().any(|b| (0x80..=0x9f).contains(&b)));
        assert_eq!(f(tricky), tricky);
        // NUL, ENQ (the answerback), DEL and friends are dropped.
        assert_eq!(f("a\x00\x05\x7f\x0b\x0cb"), "ab");
    }

    #[test]
    fn malformed_utf8_becomes_replacement_characters() {
        let r = "\u{fffd}";
        for (input, want) in [
            (&b"\xc3"[..], String::new()),
            (b"\xc3a", format!("{r}a")),
            (b"\xe2\x82a", format!("{r}a")),
            (b"\xa9", String::from(r)),
            (b"\xc0\xaf", format!("{r}{r}")),
            (b"\xed\xa0\x80", format!("{r}{r}")),
            (b"\xf5", String::from(r)),
            (b"\xe2\x1b[31m", format!("{r}\x1b[31m")),
        ] {
            assert_eq!(
                String::from_utf8(filter(input)).unwrap(),
                want,
                "{input:x?}"
            );
        }
    }

    #[test]
    fn clipboard_writes_and_queries_are_dropped_in_every_form() {
        let payload = "c;aGVsbG8gd29ybGQ=";
        for open in ["\x1b]52;", "\u{9d}52;"] {
            for close in ["\x07", "\x1b\\", "\u{9c}"] {
                for body in [payload, "c;?", "p;?", ";"] {
                    let s = format!("a{open}{body}{close}b");
                    assert_eq!(f(&s), "ab", "{s:?}");
                }
            }
        }
        // Raw 8-bit OSC and ST, as a terminal in 8-bit mode reads them.
        assert_eq!(filter(b"a\x9d52;c;?\x9cb"), b"ab");
        assert_eq!(filter(b"a\x9d52;c;aGk=\x07b"), b"ab");
        // A UTF-8 character holding 0x9c does not end the string early.
        assert_eq!(f("a\x1b]52;c;\u{271c}\u{271c}x\x07b"), "ab");
        // Split across calls: the state carries over.
        let mut flt = TermFilter::new();
        let mut out = Vec::new();
        for part in ["x\x1b]5", "2;c;aGVs", "bG8=\x1b", "\\y"] {
            for b in part.bytes() {
                flt.push(b, &mut out);
            }
        }
        assert_eq!(out, b"xy");
    }

    #[test]
    fn titles_hyperlinks_colours_and_strings_are_dropped() {
        for s in [
            "\x1b]0;pwned\x07",
            "\x1b]2;victim login\x1b\\",
            "\x1b]1;icon\x07",
            "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",
            "\x1b]4;1;?\x07",
            "\x1b]10;?\x07",
            "\x1b]11;rgb:0/0/0\x07",
            "\x1b]104\x07",
            "\x1bP$qm\x1b\\",
            "\x1bP+q544e\x1b\\",
            "\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\",
            "\x1bPq#0;2;0;0;0#0~~@@vv\x1b\\",
            "\u{90}$qm\u{9c}",
            "\x1b_Gf=24;AAAA\x1b\\",
            "\x1b^privacy\x1b\\",
            "\x1bXstart of string\x1b\\",
            "\x1bktitle\x1b\\",
        ] {
            let out = f(&format!("[{s}]"));
            assert!(
                out == "[]" || out == "[link]" || out == "[title]",
                "{s:?} gave {out:?}"
            );
        }
    }

    #[test]
    fn queries_are_dropped() {
        for q in [
            "\x1b[5n",
            "\x1b[6n",
            "\x1b[?6n",
            "\x1b[c",
            "\x1b[0c",
            "\x1b[>c",
            "\x1b[>0c",
            "\x1b[=c",
            "\x1b[?1049$p",
            "\x1b[2$p",
            "\x1b[14t",
            "\x1b[18t",
            "\x1b[21t",
            "\x1b[22;0t",
            "\x1b[1x",
            "\x1bZ",
            "\x05",
            "\u{9b}6n",
            "\u{9b}c",
        ] {
            assert_eq!(f(&format!("a{q}b")), "ab", "{q:?}");
        }
        assert_eq!(filter(b"a\x9b6nb"), b"ab");
        assert_eq!(filter(b"a\x9b>0cb"), b"ab");
    }

    #[test]
    fn long_parameter_strings_never_get_through() {
        for n in [15, 16, 17, 100, 10_000] {
            // The old replay filter's bypass: a query past 16 bytes.
            let digits = "1".repeat(n);
            for q in [
                format!("\x1b[{digits}n"),
                format!("\x1b[{}6n", "0".repeat(n)),
                format!("\x1b[{}c", "1;".repeat(n)),
                format!("\x1b[?{}1000h", "0".repeat(n)),
                format!("\x1b]{}\x07", "5".repeat(n)),
            ] {
                assert_eq!(checked(format!("a{q}b").as_bytes()), b"ab", "{n}");
            }
            // Too many parameters: the whole sequence goes.
            let many = format!("a\x1b[{}8m", "1;".repeat(n));
            let out = checked(many.as_bytes());
            if n < MAX_PARAMS {
                let ones = vec!["1"; n].join(";");
                assert_eq!(out, format!("a\x1b[{ones}m").as_bytes());
            } else {
                assert_eq!(out, b"a");
            }
            // A long number saturates and is written short.
            assert_eq!(
                checked(format!("\x1b[{}1m", "0".repeat(n)).as_bytes()),
                b"\x1b[1m"
            );
        }
    }

    #[test]
    fn concealed_and_blink_are_taken_out_of_sgr() {
        for (input, want) in [
            ("\x1b[1;8;31m", "\x1b[1;31m"),
            ("\x1b[8m", ""),
            ("\x1b[5m", ""),
            ("\x1b[6;8m", ""),
            ("\x1b[m", "\x1b[m"),
            ("\x1b[0m", "\x1b[0m"),
            ("\x1b[;8m", "\x1b[m"),
            ("\x1b[7;28m", "\x1b[7;28m"),
            ("\x1b[38;5;8m", "\x1b[38;5;8m"),
            ("\x1b[48;2;8;5;8;8m", "\x1b[48;2;8;5;8m"),
            ("\x1b[38;5m", ""),
            ("\x1b[1;38;7;8m", "\x1b[1m"),
            ("\x1b[38:5:8m", "\x1b[38;5;8m"),
            ("\x1b[38:2::1:2:3m", "\x1b[38;2;1;2;3m"),
            ("\x1b[58:2:1:2:3;4:3m", "\x1b[58;2;1;2;3;4:3m"),
            ("\x1b[4:5m", ""),
            ("\x1b[1:8m", ""),
            ("\x1b[:8m", ""),
            ("\x1b[38;5:8m", ""),
            ("\x1b[99m", ""),
            (
                "\x1b[0;1;2;3;4;7;9;22;23;24;27;29;39;49;53;55m",
                "\x1b[0;1;2;3;4;7;9;22;23;24;27;29;39;49;53;55m",
            ),
            ("\u{9b}1;8m", "\x1b[1m"),
        ] {
            assert_eq!(f(input), want, "{input:?}");
        }
    }

    #[test]
    fn cursor_movement_erase_and_full_screen_modes_pass() {
        for s in [
            "\x1b[H",
            "\x1b[2J",
            "\x1b[J",
            "\x1b[K",
            "\x1b[10;20H",
            "\x1b[;5H",
            "\x1b[3A",
            "\x1b[1;24r",
            "\x1b[r",
            "\x1b[s",
            "\x1b[u",
            "\x1b[4h",
            "\x1b[?1049h",
            "\x1b[?1049l",
            "\x1b[?1h",
            "\x1b[?25l",
            "\x1b[?2004h",
            "\x1b[?7l",
            "\x1b[2 q",
            "\x1b7",
            "\x1b8",
            "\x1bM",
            "\x1b=",
            "\x1b>",
            "\x1b(0",
            "\x1b(B",
        ] {
            assert_eq!(f(s), s);
        }
        // Written in canonical form.
        assert_eq!(f("\u{9b}005;0010H"), "\x1b[5;10H");
        assert_eq!(f("\u{84}\u{85}\u{8d}"), "\x1bD\x1bE\x1bM");
        // C0 controls inside a sequence act at once.
        assert_eq!(f("\x1b[1\r;2H"), "\r\x1b[1;2H");
        // Scrollback erase, mouse, focus and keyboard protocols: dropped.
        for s in [
            "\x1b[3J",
            "\x1b[?1000h",
            "\x1b[?1002h",
            "\x1b[?1003h",
            "\x1b[?1004h",
            "\x1b[?1005h",
            "\x1b[?1006h",
            "\x1b[?1015h",
            "\x1b[?9h",
            "\x1b[?2026h",
            "\x1b[?3h",
            "\x1b[?5h",
            "\x1b[?6h",
            "\x1b[>4;2m",
            "\x1b[>1u",
            "\x1b[=1;1u",
            "\x1b[<u",
            "\x1b[20h",
            "\x1b[12l",
            "\x1b[!p",
            "\x1b[3g",
            "\x1bH",
            "\x1bc",
            "\x1b#8",
            "\x1b G",
            "\x1b%G",
            "\x1b[1;2;3;4;5T",
            "\x1b[1:2H",
            "\x1b[2;1$x",
        ] {
            assert_eq!(f(&format!("a{s}b")), "ab", "{s:?}");
        }
        // A list of modes keeps the allowed ones.
        assert_eq!(f("\x1b[?1049;1000;2004h"), "\x1b[?1049h\x1b[?2004h");
    }

    #[test]
    fn c1_controls_written_as_utf8_are_controls() {
        // U+009B is CSI to a UTF-8 terminal.
        assert_eq!(f("a\u{9b}6nb"), "ab");
        assert_eq!(f("a\u{9b}31mb"), "a\x1b[31mb");
        assert_eq!(f("a\u{9d}0;x\u{9c}b"), "ab");
        assert_eq!(f("a\u{90}q\u{9c}b"), "ab");
        assert_eq!(f("a\u{9f}apc\u{9c}b"), "ab");
    }

    #[test]
    fn utf8_and_sequences_interleave() {
        let s = "a\u{f1}\x1b]52;c;\u{e9}\u{e9}\x07\u{20ac}\x1b[1;8m\u{1f600}\x1b[6n\u{271c}";
        assert_eq!(f(s), "a\u{f1}\u{20ac}\x1b[1m\u{1f600}\u{271c}");
        // A sequence started inside a character cuts the character.
        assert_eq!(filter(b"\xe2\x9c\x1b[1m"), "\u{fffd}\x1b[1m".as_bytes());
    }

    #[test]
    fn modes_are_remembered_reset_and_restored() {
        let mut flt = TermFilter::new();
        let mut out = Vec::new();
        for b in
            "\x1b[?1049h\x1b[?1h\x1b=\x1b[?2004h\x1b[?25l\x1b[?7l\x1b[4h\x1b[2;20r\x1b[4 q".bytes()
        {
            flt.push(b, &mut out);
        }
        let m = flt.modes();
        assert_eq!(m.alt_screen, Some(1049));
        assert!(m.cursor_keys && m.keypad && m.bracketed_paste && m.cursor_hidden);
        assert!(m.no_autowrap && m.insert);
        assert_eq!(m.region, Some((2, 20)));
        assert_eq!(m.cursor_shape, 4);
        let mut reset = Vec::new();
        flt.write_reset(true, &mut reset);
        let reset = String::from_utf8(reset).unwrap();
        assert!(
            reset.starts_with("\x1b[?1049l\x1b7\x1b[r\x1b8\x1b[0m"),
            "{reset:?}"
        );
        assert!(reset.ends_with("\x1b[0 q"));
        for part in [
            "\x1b[?25h",
            "\x1b[?7h",
            "\x1b[4l",
            "\x1b[?1l",
            "\x1b>",
            "\x1b[?2004l",
            "\x1b[?9;1000;1001;1002;1003;1004;1005;1006;1015;1016l",
            "\x1b(B",
            "\x1b)B\x0f",
        ] {
            assert!(reset.contains(part), "{part:?} missing from {reset:?}");
        }
        // Without undo: the fixed string only (the alternate screen is not
        // left twice).
        let mut fixed = Vec::new();
        flt.write_reset(false, &mut fixed);
        assert_eq!(fixed, RESET);
        let mut restore = Vec::new();
        flt.write_restore(&mut restore);
        assert_eq!(
            String::from_utf8(restore).unwrap(),
            "\x1b[?1049h\x1b7\x1b[2;20r\x1b8\x1b[?25l\x1b[?7l\x1b[?1h\x1b[?2004h\x1b[4h\x1b=\x1b[4 q"
        );
        // Turning them off again leaves nothing to undo.
        for b in "\x1b[?1049l\x1b[?1l\x1b>\x1b[?2004l\x1b[?25h\x1b[?7h\x1b[4l\x1b[r\x1b[0 q".bytes()
        {
            flt.push(b, &mut out);
        }
        assert_eq!(flt.modes(), Modes::default());
        let mut restore = Vec::new();
        flt.write_restore(&mut restore);
        assert!(restore.is_empty());
        check(RESET).expect_err("the reset holds what VMs may not send");
    }

    #[test]
    fn half_read_sequences_stay_inside() {
        let mut flt = TermFilter::new();
        let mut out = Vec::new();
        for b in b"x\x1b[3" {
            flt.push(*b, &mut out);
        }
        assert_eq!(out, b"x");
        assert!(!flt.is_ground());
        flt.abort();
        assert!(flt.is_ground());
        for b in b"1mA" {
            flt.push(*b, &mut out);
        }
        assert_eq!(out, b"x1mA");
    }

    /// A xorshift generator (no dependencies).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn random_bytes_never_make_a_forbidden_sequence() {
        // Bytes weighted towards the parser's interesting ones.
        const HOT: &[u8] = b"\x1b\x1b\x1b[[[]]P^_X\\;;;::??>=<$ !\"'0123456789mmhlnctqJHr\x07\x18\x1a\x9b\x9d\x90\x9c\x98\x9e\x9f\x84\xc2\xe2\x9c\x80\xbf\xf0\x0a\x0d";
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut flt = TermFilter::new();
        let (mut total, mut sequences) = (0, 0);
        for _ in 0..200_000 {
            let r = rng.next();
            let b = if r & 3 == 0 {
                (r >> 8) as u8
            } else {
                HOT[(r >> 8) as usize % HOT.len()]
            };
            let mut out = Vec::new();
            flt.push(b, &mut out);
            total += out.len();
            sequences += usize::from(out.first() == Some(&0x1b));
            // Each call's output is complete and allowed on its own.
            if let Err(e) = check(&out) {
                panic!("{e} after byte {b:#x}");
            }
        }
        assert!(total > 10_000, "the test reached the output: {total}");
        assert!(sequences > 1_000, "sequences came through: {sequences}");
    }

    #[test]
    fn random_sequences_never_make_a_forbidden_sequence() {
        // Whole sequences of random parameters and finals.
        let mut rng = Rng(42);
        let mut passed = 0;
        for _ in 0..50_000 {
            let mut s = vec![0x1b, b'['];
            let r = rng.next();
            if r & 1 == 0 {
                s.push(b"?><=".get((r >> 1) as usize % 6).copied().unwrap_or(b'?'));
            }
            for _ in 0..(r >> 8) % 8 {
                let v = rng.next();
                let n = [1, 5, 6, 8, 38, 48, 58, 2, 1000, 1049, 3, 4][(v % 12) as usize];
                s.extend(format!("{n}").bytes());
                s.push(if (v >> 20) & 7 == 0 { b':' } else { b';' });
            }
            if (r >> 30) & 3 == 0 {
                s.push(b" $!\"'"[(r >> 33) as usize % 5]);
            }
            s.push(0x40 + (rng.next() % 0x3f) as u8);
            let out = checked(&s);
            passed += usize::from(!out.is_empty());
        }
        assert!(passed > 1000, "some pass: {passed}");
    }
}

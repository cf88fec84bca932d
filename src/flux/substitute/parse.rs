//! The `${...}` parser of Flux's envsubst (fluxcd/pkg `envsubst/parse`, a fork of drone/envsubst).
//!
//! This is a byte-for-byte port of that scanner rather than a fresh grammar: its quirks decide
//! what Flux renders (`$${v}` escapes only at top level and inside `/` arguments, `${v-d}` is a
//! syntax error, `::` is one delimiter in `${v:1::2}`, text after a NUL byte is dropped), and
//! a cleaner parser would render some manifests differently from kustomize-controller.

use super::FluxSyntaxError;

/// Go's `eof` sentinel is rune 0, so a NUL in the input also ends the scan, as in Flux.
const EOF: char = '\0';

/// Nesting deeper than this is refused instead of overflowing the stack (Go's stacks grow).
pub(crate) const MAX_DEPTH: usize = 256;

const SCAN_IDENT: u8 = 1;
const SCAN_LBRACK: u8 = 1 << 1;
const SCAN_RBRACK: u8 = 1 << 2;
const SCAN_ESCAPE: u8 = 1 << 3;

const ESC_DOLLAR: u8 = 1;
const ESC_BACKSLASH: u8 = 1 << 1;
const ESC_ALL: u8 = ESC_DOLLAR | ESC_BACKSLASH;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Illegal,
    Eof,
    Ident,
    Lbrack,
    Rbrack,
}

/// The scanner's acceptor functions; `i` is the byte offset after the rune, as in Go.
#[derive(Clone, Copy, Debug)]
enum Accept {
    Rune,
    Ident,
    Colon,
    OneHash,
    NotClosing,
    HashFunc,
    PercentFunc,
    DefaultFunc,
    ReplaceFunc,
    OneEqual,
    OneColon,
    RejectColonClose,
    Slash,
    NotSlash,
    CasingFunc,
}

impl Accept {
    fn ok(self, r: char, i: usize) -> bool {
        match self {
            Accept::Rune => true,
            // Go: unicode.IsLetter || unicode.IsDigit || '_'.
            Accept::Ident => r.is_alphabetic() || r.is_numeric() || r == '_',
            Accept::Colon => r == ':',
            Accept::OneHash => r == '#' && i == 1,
            Accept::NotClosing => r != '}',
            Accept::HashFunc => r == '#' && i < 3,
            Accept::PercentFunc => r == '%' && i < 3,
            Accept::DefaultFunc => {
                (i == 1 && r == ':') || (i == 2 && matches!(r, '=' | '-' | '?' | '+'))
            }
            Accept::ReplaceFunc => (i == 1 && r == '/') || (i == 2 && matches!(r, '/' | '#' | '%')),
            Accept::OneEqual => i == 1 && r == '=',
            Accept::OneColon => i == 1 && r == ':',
            Accept::RejectColonClose => r != ':' && r != '}',
            Accept::Slash => r == '/',
            Accept::NotSlash => r != '/',
            Accept::CasingFunc => (r == ',' || r == '^') && i < 3,
        }
    }
}

/// A node of the parse tree. Text is raw bytes: the Go original slices by byte offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Text(Vec<u8>),
    Func(FuncNode),
}

/// `${param<name>args...}`; `name` is the operator (`""` for a bare reference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FuncNode {
    pub(crate) param: String,
    pub(crate) name: String,
    pub(crate) args: Vec<Node>,
}

/// Decodes one rune like Go's `utf8.DecodeRune`: invalid input is U+FFFD with width 1.
fn decode_rune(bytes: &[u8]) -> (char, usize) {
    let Some(&b0) = bytes.first() else {
        return (char::REPLACEMENT_CHARACTER, 0);
    };
    let n = match b0 {
        0x00..=0x7f => return (b0 as char, 1),
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return (char::REPLACEMENT_CHARACTER, 1),
    };
    match bytes.get(..n).map(std::str::from_utf8) {
        Some(Ok(s)) => match s.chars().next() {
            Some(c) => (c, n),
            None => (char::REPLACEMENT_CHARACTER, 1),
        },
        _ => (char::REPLACEMENT_CHARACTER, 1),
    }
}

struct Scanner {
    buf: Vec<u8>,
    pos: usize,
    start: usize,
    width: usize,
    mode: u8,
    escape_chars: u8,
    accept: Accept,
}

impl Scanner {
    fn new(text: &str) -> Self {
        Scanner {
            buf: text.as_bytes().to_vec(),
            pos: 0,
            start: 0,
            width: 0,
            mode: 0,
            escape_chars: 0,
            accept: Accept::Rune,
        }
    }

    fn read(&mut self) -> char {
        if self.pos >= self.buf.len() {
            self.width = 0;
            return EOF;
        }
        let (r, w) = decode_rune(&self.buf[self.pos..]);
        self.width = w;
        self.pos += w;
        r
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(self.width);
    }

    /// Drops the escape character just read; the escaped one after it counts as consumed.
    fn skip(&mut self) {
        if self.pos > 0 && self.pos <= self.buf.len() {
            self.buf.remove(self.pos - 1);
        }
    }

    fn peek(&mut self) -> char {
        let r = self.read();
        self.unread();
        r
    }

    fn string(&self) -> Vec<u8> {
        self.buf
            .get(self.start..self.pos)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    fn scan(&mut self) -> Token {
        self.start = self.pos;
        let r = self.read();
        if r == EOF {
            Token::Eof
        } else if self.scan_lbrack(r) {
            Token::Lbrack
        } else if self.scan_rbrack(r) {
            Token::Rbrack
        } else if self.scan_ident(r) {
            Token::Ident
        } else {
            Token::Illegal
        }
    }

    fn scan_ident(&mut self, r: char) -> bool {
        if self.mode & SCAN_IDENT == 0 {
            return false;
        }
        if self.scan_escaped(r) {
            self.skip();
        } else if !self.accept.ok(r, self.pos - self.start) {
            return false;
        }
        loop {
            let r = self.read();
            if r == EOF {
                self.unread();
                break;
            }
            if self.scan_lbrack(r) {
                self.unread();
                self.unread();
                break;
            }
            if self.scan_escaped(r) {
                self.skip();
                continue;
            }
            if !self.accept.ok(r, self.pos - self.start) {
                self.unread();
                break;
            }
        }
        true
    }

    fn scan_lbrack(&mut self, r: char) -> bool {
        if self.mode & SCAN_LBRACK == 0 {
            return false;
        }
        if r == '$' {
            if self.read() == '{' {
                return true;
            }
            self.unread();
        }
        false
    }

    fn scan_rbrack(&self, r: char) -> bool {
        self.mode & SCAN_RBRACK != 0 && r == '}'
    }

    fn scan_escaped(&mut self, r: char) -> bool {
        if self.mode & SCAN_ESCAPE == 0 {
            return false;
        }
        if r == '$' && self.escape_chars & ESC_DOLLAR != 0 && self.peek() == '$' {
            return true;
        }
        if r == '\\' && self.escape_chars & ESC_BACKSLASH != 0 {
            return matches!(self.peek(), '/' | '\\');
        }
        false
    }
}

/// Parses a whole text into its top-level nodes.
pub(crate) fn parse(text: &str) -> Result<Vec<Node>, FluxSyntaxError> {
    Parser {
        sc: Scanner::new(text),
    }
    .parse_any()
}

struct Parser {
    sc: Scanner,
}

fn lossy(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

impl Parser {
    /// Go recurses once per token here; a loop yields the same nodes without deep stacks.
    fn parse_any(&mut self) -> Result<Vec<Node>, FluxSyntaxError> {
        let mut nodes = Vec::new();
        loop {
            self.sc.accept = Accept::Rune;
            self.sc.mode = SCAN_IDENT | SCAN_LBRACK | SCAN_ESCAPE;
            self.sc.escape_chars = ESC_DOLLAR;
            match self.sc.scan() {
                Token::Ident => nodes.push(Node::Text(self.sc.string())),
                Token::Eof => return Ok(nodes),
                Token::Lbrack => nodes.push(self.parse_func(1)?),
                Token::Illegal | Token::Rbrack => return Err(FluxSyntaxError::BadSubstitution),
            }
        }
    }

    fn parse_func(&mut self, depth: usize) -> Result<Node, FluxSyntaxError> {
        if depth > MAX_DEPTH {
            return Err(FluxSyntaxError::TooDeep);
        }
        self.sc.escape_chars = ESC_ALL;
        if self.sc.peek() == '#' {
            return self.parse_len_func();
        }
        self.sc.accept = Accept::Ident;
        self.sc.mode = SCAN_IDENT;
        let name = match self.sc.scan() {
            Token::Ident => lossy(self.sc.string()),
            _ => return Err(FluxSyntaxError::ParseVariableName),
        };
        match self.sc.peek() {
            ':' => return self.parse_default_or_substr(name, depth),
            '=' => return self.parse_default_func(name, depth),
            ',' | '^' => return self.parse_casing_func(name),
            '/' => return self.parse_replace_func(name, depth),
            '#' => return self.parse_remove_func(name, Accept::HashFunc, depth),
            '%' => return self.parse_remove_func(name, Accept::PercentFunc, depth),
            _ => {}
        }
        self.sc.accept = Accept::Ident;
        self.sc.mode = SCAN_RBRACK;
        match self.sc.scan() {
            Token::Rbrack => Ok(Node::Func(FuncNode {
                param: name,
                name: String::new(),
                args: Vec::new(),
            })),
            _ => Err(FluxSyntaxError::MissingClosingBrace),
        }
    }

    fn parse_param(
        &mut self,
        accept: Accept,
        mode: u8,
        depth: usize,
    ) -> Result<Node, FluxSyntaxError> {
        self.sc.accept = accept;
        self.sc.mode = mode | SCAN_LBRACK;
        match self.sc.scan() {
            Token::Lbrack => self.parse_func(depth + 1),
            Token::Ident | Token::Rbrack => Ok(Node::Text(self.sc.string())),
            Token::Eof | Token::Illegal => Err(FluxSyntaxError::ParseFuncSubstitution),
        }
    }

    fn parse_default_or_substr(
        &mut self,
        name: String,
        depth: usize,
    ) -> Result<Node, FluxSyntaxError> {
        self.sc.read();
        let r = self.sc.peek();
        self.sc.unread();
        match r {
            '=' | '-' | '?' | '+' => self.parse_default_func(name, depth),
            _ => self.parse_substr_func(name, depth),
        }
    }

    fn op_token(
        &mut self,
        accept: Accept,
        err: FluxSyntaxError,
    ) -> Result<String, FluxSyntaxError> {
        self.sc.accept = accept;
        self.sc.mode = SCAN_IDENT;
        match self.sc.scan() {
            Token::Ident => Ok(lossy(self.sc.string())),
            _ => Err(err),
        }
    }

    fn parse_substr_func(&mut self, param: String, depth: usize) -> Result<Node, FluxSyntaxError> {
        let name = self.op_token(Accept::OneColon, FluxSyntaxError::BadSubstitution)?;
        let mut args = vec![self.parse_param(Accept::RejectColonClose, SCAN_IDENT, depth)?];
        self.sc.accept = Accept::Colon;
        self.sc.mode = SCAN_IDENT | SCAN_RBRACK;
        match self.sc.scan() {
            Token::Rbrack => return Ok(Node::Func(FuncNode { param, name, args })),
            Token::Ident => {}
            _ => return Err(FluxSyntaxError::BadSubstitution),
        }
        args.push(self.parse_param(Accept::NotClosing, SCAN_IDENT, depth)?);
        self.consume_rbrack()?;
        Ok(Node::Func(FuncNode { param, name, args }))
    }

    fn parse_remove_func(
        &mut self,
        param: String,
        accept: Accept,
        depth: usize,
    ) -> Result<Node, FluxSyntaxError> {
        let name = self.op_token(accept, FluxSyntaxError::BadSubstitution)?;
        let args = vec![self.parse_param(Accept::NotClosing, SCAN_IDENT, depth)?];
        self.consume_rbrack()?;
        Ok(Node::Func(FuncNode { param, name, args }))
    }

    fn parse_replace_func(&mut self, param: String, depth: usize) -> Result<Node, FluxSyntaxError> {
        let name = self.op_token(Accept::ReplaceFunc, FluxSyntaxError::BadSubstitution)?;
        // An empty pattern (`${v/#/x}`) is recorded as empty text, as the current Flux does.
        let mut args = if self.sc.peek() == '/' {
            vec![Node::Text(Vec::new())]
        } else {
            vec![self.parse_param(Accept::NotSlash, SCAN_IDENT | SCAN_ESCAPE, depth)?]
        };
        self.op_token(Accept::Slash, FluxSyntaxError::BadSubstitution)?;
        if self.sc.peek() == '}' {
            self.consume_rbrack()?;
            return Ok(Node::Func(FuncNode { param, name, args }));
        }
        args.push(self.parse_param(Accept::NotClosing, SCAN_IDENT | SCAN_ESCAPE, depth)?);
        self.consume_rbrack()?;
        Ok(Node::Func(FuncNode { param, name, args }))
    }

    fn parse_default_func(&mut self, param: String, depth: usize) -> Result<Node, FluxSyntaxError> {
        let accept = if self.sc.peek() == '=' {
            Accept::OneEqual
        } else {
            Accept::DefaultFunc
        };
        let name = self.op_token(accept, FluxSyntaxError::ParseDefaultFunction)?;
        let mut args = Vec::new();
        loop {
            if self.sc.peek() == '}' {
                self.consume_rbrack()?;
                return Ok(Node::Func(FuncNode { param, name, args }));
            }
            args.push(self.parse_param(Accept::NotClosing, SCAN_IDENT, depth)?);
        }
    }

    fn parse_casing_func(&mut self, param: String) -> Result<Node, FluxSyntaxError> {
        let name = self.op_token(Accept::CasingFunc, FluxSyntaxError::BadSubstitution)?;
        self.consume_rbrack()?;
        Ok(Node::Func(FuncNode {
            param,
            name,
            args: Vec::new(),
        }))
    }

    fn parse_len_func(&mut self) -> Result<Node, FluxSyntaxError> {
        let name = self.op_token(Accept::OneHash, FluxSyntaxError::BadSubstitution)?;
        let param = self.op_token(Accept::Ident, FluxSyntaxError::BadSubstitution)?;
        self.consume_rbrack()?;
        Ok(Node::Func(FuncNode {
            param,
            name,
            args: Vec::new(),
        }))
    }

    fn consume_rbrack(&mut self) -> Result<(), FluxSyntaxError> {
        self.sc.mode = SCAN_RBRACK;
        if self.sc.scan() != Token::Rbrack {
            return Err(FluxSyntaxError::BadSubstitution);
        }
        Ok(())
    }
}

//! llama.cpp's GBNF grammars (`grammars/README.md` of llama.cpp), translated to llguidance's
//! Lark syntax, which the constraint engine compiles.
//!
//! GBNF: rules `name ::= alternatives`, `root` the start; string literals `"..."`, character
//! classes `[a-z]` / `[^...]`, `.` (any character), groups `( ... )`, the operators `*`, `+`,
//! `?`, `{m}`, `{m,}`, `{m,n}`, `#` comments, tokens `<[id]>` / `<text>` and their negation
//! `!<[id]>`; escapes `\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`. A rule ends at a newline
//! outside parentheses unless the line ends with `|`.
//!
//! Every rule becomes a Lark rule named `g_` plus its name (upper-case letters written `_x`,
//! since Lark reserves upper-case names for terminals and GBNF names have no `_`), literals
//! become JSON-quoted Lark strings, classes and `.` become regular expressions with every
//! character written as `\x{HEX}`. Errors name the line and column of the GBNF text.

use super::ConstraintError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The Lark grammar for the GBNF grammar `src`, or the first problem found in it.
pub fn gbnf_to_lark(src: &str) -> Result<String, ConstraintError> {
    let mut p = Parser { chars: src.chars().collect(), pos: 0, line: 1, col: 1 };
    let mut rules: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut used: Vec<(String, usize, usize)> = Vec::new();
    loop {
        p.skip_space(true);
        if p.at_end() {
            break;
        }
        let (line, col) = (p.line, p.col);
        let name = p.name().ok_or_else(|| p.error("expected a rule name"))?;
        p.skip_space(false);
        if !p.eat_str("::=") {
            return Err(p.error(&format!("expected ::= after the rule name {name:?}")));
        }
        let body = p.alternatives(false, &mut used)?;
        p.skip_space(false);
        if !p.at_end() && !p.eat('\n') && !p.eat_str("\r\n") {
            return Err(p.error("expected the end of the rule (a newline)"));
        }
        if rules.insert(name.clone(), body).is_some() {
            return Err(ConstraintError::Grammar(format!(
                "GBNF line {line}, column {col}: the rule {name:?} is defined twice"
            )));
        }
        order.push(name);
    }
    if !rules.contains_key("root") {
        return Err(ConstraintError::Grammar("GBNF: the grammar has no `root` rule".into()));
    }
    let mut undefined = BTreeSet::new();
    for (name, line, col) in &used {
        if !rules.contains_key(name) && undefined.insert(name) {
            return Err(ConstraintError::Grammar(format!(
                "GBNF line {line}, column {col}: the rule {name:?} is used but never defined"
            )));
        }
    }
    let mut out = String::from("start: g_root\n");
    for name in &order {
        let _ = writeln!(out, "{}: {}", rule_name(name), rules[name]);
    }
    Ok(out)
}

/// The Lark name of the GBNF rule `name`.
fn rule_name(name: &str) -> String {
    let mut s = String::from("g_");
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    col: usize,
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.pos + n <= self.chars.len()
            && self.chars[self.pos..self.pos + n].iter().copied().eq(s.chars())
        {
            for _ in 0..n {
                self.bump();
            }
            true
        } else {
            false
        }
    }

    fn error(&self, what: &str) -> ConstraintError {
        let found = match self.peek() {
            None => "the end of the grammar".to_string(),
            Some(c) => format!("{c:?}"),
        };
        ConstraintError::Grammar(format!(
            "GBNF line {}, column {}: {what} (found {found})",
            self.line, self.col
        ))
    }

    /// Spaces, tabs and comments; newlines too when `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => {
                    self.bump();
                }
                '\r' | '\n' if newlines => {
                    self.bump();
                }
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    /// A rule name: `[a-zA-Z0-9-]+`.
    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '-') {
            self.bump();
        }
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    /// `seq | seq | ...` up to `)` (when `nested`) or the end of the rule.
    fn alternatives(
        &mut self,
        nested: bool,
        used: &mut Vec<(String, usize, usize)>,
    ) -> Result<String, ConstraintError> {
        let mut alts = vec![self.sequence(nested, used)?];
        loop {
            self.skip_space(nested);
            if !self.eat('|') {
                break;
            }
            // A newline after `|` continues the rule.
            self.skip_space(true);
            alts.push(self.sequence(nested, used)?);
        }
        Ok(alts.join(" | "))
    }

    /// Items up to `|`, `)` or the end of the rule; `""` when there are none.
    fn sequence(
        &mut self,
        nested: bool,
        used: &mut Vec<(String, usize, usize)>,
    ) -> Result<String, ConstraintError> {
        let mut items: Vec<String> = Vec::new();
        loop {
            self.skip_space(nested);
            let (line, col) = (self.line, self.col);
            let atom = match self.peek() {
                None | Some('|') | Some(')') | Some('\n') | Some('\r') => break,
                Some('"') => {
                    self.bump();
                    let text = self.literal()?;
                    quote(&text)
                }
                Some('[') => {
                    self.bump();
                    self.class()?
                }
                Some('.') => {
                    self.bump();
                    "/(?s:.)/".to_string()
                }
                Some('(') => {
                    self.bump();
                    let inner = self.alternatives(true, used)?;
                    self.skip_space(true);
                    if !self.eat(')') {
                        return Err(self.error("expected ) to close the group"));
                    }
                    format!("({inner})")
                }
                Some('<') => self.token(false)?,
                Some('!') => {
                    self.bump();
                    if self.peek() != Some('<') {
                        return Err(self.error("expected a token <...> after !"));
                    }
                    self.token(true)?
                }
                Some(c) if c.is_ascii_alphanumeric() || c == '-' => {
                    let name = self.name().unwrap_or_default();
                    used.push((name.clone(), line, col));
                    rule_name(&name)
                }
                Some(_) => return Err(self.error("unexpected character")),
            };
            items.push(format!("{atom}{}", self.repetition()?));
        }
        if items.is_empty() {
            Ok("\"\"".to_string())
        } else {
            Ok(items.join(" "))
        }
    }

    /// An operator after an item: `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, or nothing.
    fn repetition(&mut self) -> Result<String, ConstraintError> {
        match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.bump();
                Ok(c.to_string())
            }
            Some('{') => {
                self.bump();
                self.skip_space(false);
                let min = self.number()?;
                self.skip_space(false);
                let max = if self.eat(',') {
                    self.skip_space(false);
                    if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        Some(self.number()?)
                    } else {
                        None
                    }
                } else {
                    Some(min)
                };
                self.skip_space(false);
                if !self.eat('}') {
                    return Err(self.error("expected } to close the repetition"));
                }
                match max {
                    Some(0) => Err(self.error(
                        "a repetition of at most 0 times matches nothing; leave the item out",
                    )),
                    Some(max) if max < min => Err(self.error(&format!(
                        "the repetition {{{min},{max}}} has its maximum below its minimum"
                    ))),
                    Some(max) => Ok(format!("{{{min},{max}}}")),
                    None if min == 0 => Ok("*".to_string()),
                    None if min == 1 => Ok("+".to_string()),
                    None => Ok(format!("{{{min},}}")),
                }
            }
            _ => Ok(String::new()),
        }
    }

    fn number(&mut self) -> Result<u32, ConstraintError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        match digits.parse::<u32>() {
            Ok(n) if n <= 100_000 => Ok(n),
            Ok(_) => Err(self.error("a repetition count above 100000")),
            Err(_) => Err(self.error("expected a number")),
        }
    }

    /// The characters of a `"..."` literal after its opening quote.
    fn literal(&mut self) -> Result<String, ConstraintError> {
        let mut text = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated string literal")),
                Some('"') => {
                    self.bump();
                    return Ok(text);
                }
                Some('\\') => {
                    self.bump();
                    text.push(self.escape()?);
                }
                Some(c) => {
                    self.bump();
                    text.push(c);
                }
            }
        }
    }

    /// The character of an escape after its backslash.
    fn escape(&mut self) -> Result<char, ConstraintError> {
        let c = self.bump().ok_or_else(|| self.error("an escape at the end of the grammar"))?;
        let hex = |p: &mut Parser, n: usize| -> Result<char, ConstraintError> {
            let mut v: u32 = 0;
            for _ in 0..n {
                let d = p
                    .peek()
                    .and_then(|c| c.to_digit(16))
                    .ok_or_else(|| p.error(&format!("expected {n} hexadecimal digits")))?;
                p.bump();
                v = v * 16 + d;
            }
            char::from_u32(v)
                .ok_or_else(|| p.error(&format!("U+{v:X} is not a Unicode scalar value")))
        };
        Ok(match c {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            '\\' | '"' | '[' | ']' | '-' | '^' => c,
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            other => return Err(self.error(&format!("unknown escape \\{other}"))),
        })
    }

    /// A character class after its `[`, as a regular expression.
    fn class(&mut self) -> Result<String, ConstraintError> {
        let negated = self.eat('^');
        let mut ranges: Vec<(char, char)> = Vec::new();
        loop {
            let lo = match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated character class")),
                Some(']') => {
                    self.bump();
                    break;
                }
                Some('\\') => {
                    self.bump();
                    self.escape()?
                }
                Some(c) => {
                    self.bump();
                    c
                }
            };
            let hi = if self.peek() == Some('-') && self.chars.get(self.pos + 1) != Some(&']') {
                self.bump();
                match self.bump() {
                    Some('\\') => self.escape()?,
                    Some(c) if c != '\n' => c,
                    _ => return Err(self.error("unterminated character range")),
                }
            } else {
                lo
            };
            if hi < lo {
                return Err(self.error(&format!("the character range {lo:?}-{hi:?} is reversed")));
            }
            ranges.push((lo, hi));
        }
        if ranges.is_empty() && !negated {
            return Err(self.error("an empty character class [] matches nothing"));
        }
        if ranges.is_empty() {
            // [^] is any character
            return Ok("/(?s:.)/".to_string());
        }
        let mut rx = String::from(if negated { "/[^" } else { "/[" });
        for (lo, hi) in ranges {
            let _ = write!(rx, "\\x{{{:X}}}", lo as u32);
            if hi != lo {
                let _ = write!(rx, "-\\x{{{:X}}}", hi as u32);
            }
        }
        rx.push_str("]/");
        Ok(rx)
    }

    /// `<[id]>`, `<[a-b,c]>` or `<text>` (a vocabulary token), negated with `!`.
    fn token(&mut self, negated: bool) -> Result<String, ConstraintError> {
        let start = self.pos;
        self.bump();
        while self.peek().is_some_and(|c| c != '>' && c != '<' && !c.is_whitespace()) {
            self.bump();
        }
        if !self.eat('>') {
            return Err(self.error("expected > to close the token"));
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let inner = &text[1..text.len() - 1];
        if inner.is_empty() {
            return Err(self.error("an empty token <>"));
        }
        if let Some(ids) = inner.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            if ids.is_empty() || !ids.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '-') {
                return Err(self.error(&format!("the token ids {ids:?} are not numbers")));
            }
            return Ok(if negated { format!("<[^{ids}]>") } else { text });
        }
        if negated {
            return Err(self.error(&format!(
                "a negated token by text (!{text}) is not supported; name its id: !<[ID]>"
            )));
        }
        Ok(text)
    }
}

/// `text` as a Lark string literal (JSON syntax; control characters and DEL escaped).
fn quote(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_the_constructs() {
        let lark = gbnf_to_lark(
            "root ::= (\"a\\n\" [^x-z\\]] | item){2,5} .\n# comment\nitem ::= [0-9]+ |\n  \"\" Other-Rule?\nOther-Rule ::= <[12]> !<[7]> <think>\n",
        )
        .unwrap();
        assert_eq!(
            lark,
            "start: g_root\n\
             g_root: (\"a\\u000a\" /[^\\x{78}-\\x{7A}\\x{5D}]/ | g_item){2,5} /(?s:.)/\n\
             g_item: /[\\x{30}-\\x{39}]/+ | \"\" g__other-_rule?\n\
             g__other-_rule: <[12]> <[^7]> <think>\n"
        );
    }

    #[test]
    fn errors_name_the_place() {
        let err = |src: &str| gbnf_to_lark(src).unwrap_err().to_string();
        assert!(err("root ::= \"a").contains("line 1, column 12: unterminated string"));
        assert!(err("root ::= item\n").contains("\"item\" is used but never defined"));
        assert!(err("item ::= \"a\"\n").contains("no `root` rule"));
        assert!(err("root ::= (\"a\"\n").contains("expected ) to close the group"));
        assert!(err("root ::= \"a\"{3,1}").contains("maximum below its minimum"));
        assert!(err("root = \"a\"").contains("expected ::="));
        assert!(err("root ::= [z-a]").contains("reversed"));
        assert!(err("root ::= \"a\"\nroot ::= \"b\"").contains("defined twice"));
        assert!(err("root ::= \"\\q\"").contains("unknown escape \\q"));
    }
}

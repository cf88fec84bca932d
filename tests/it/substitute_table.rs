//! Table tests for Flux's post-build substitution, ported from fluxcd/pkg `envsubst/eval_test.go`,
//! `envsubst/parse/parse_test.go` and `kustomize/kustomize_varsub_test.go` (and drone/envsubst's
//! originals), plus the quirks read from the Flux parser itself.

use std::collections::BTreeMap;

use flux_converger::flux::substitute::{
    Options, SubstituteError, VarSource, VarSourceKind, Variables, collect_variables, envsubst,
    substitute_document, substitute_object,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::json;

fn vars(pairs: &[(&str, &str)]) -> Variables {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

struct Case {
    name: &'static str,
    vars: &'static [(&'static str, &'static str)],
    input: &'static str,
    /// `Ok(output)` or `Err(exact error text)`.
    want: Result<&'static str, &'static str>,
}

const fn ok(
    name: &'static str,
    vars: &'static [(&'static str, &'static str)],
    input: &'static str,
    out: &'static str,
) -> Case {
    Case {
        name,
        vars,
        input,
        want: Ok(out),
    }
}

const fn err(
    name: &'static str,
    vars: &'static [(&'static str, &'static str)],
    input: &'static str,
    msg: &'static str,
) -> Case {
    Case {
        name,
        vars,
        input,
        want: Err(msg),
    }
}

fn run(cases: &[Case], strict: bool) {
    let mut failures = Vec::new();
    for case in cases {
        let got = envsubst(case.input, &vars(case.vars), strict).map_err(|e| e.to_string());
        let want = case.want.map(str::to_owned).map_err(str::to_owned);
        if got != want {
            failures.push(format!(
                "{} (strict={strict}): {:?}\n   want {want:?}\n    got {got:?}",
                case.name, case.input
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

const V01: &[(&str, &str)] = &[("var01", "abcdEFGH28ij")];
const V01U: &[(&str, &str)] = &[("var01", "ABCDEFGH28IJ")];
const PATH: &[(&str, &str)] = &[("path_name", "/home/bozo/ideas/thoughts.for.today")];
const Z: &[(&str, &str)] = &[("stringZ", "abcABC123ABCabc")];
const FILE: &[(&str, &str)] = &[("filename", "bash.string.txt")];
const DEF: &[(&str, &str)] = &[("default_var", "foo")];
const NONE: &[(&str, &str)] = &[];

/// fluxcd/pkg envsubst `TestExpand` (non-strict: every variable reads as set), verbatim.
#[test]
fn flux_expand_table() {
    run(
        &[
            ok("text-only", NONE, "abcdEFGH28ij", "abcdEFGH28ij"),
            ok("length", V01, "${#var01}", "12"),
            ok("uppercase first", V01, "${var01^}", "AbcdEFGH28ij"),
            ok("uppercase", V01, "${var01^^}", "ABCDEFGH28IJ"),
            ok("lowercase first", V01U, "${var01,}", "aBCDEFGH28IJ"),
            ok("lowercase", V01U, "${var01,,}", "abcdefgh28ij"),
            ok(
                "substring with position",
                PATH,
                "${path_name:11}",
                "ideas/thoughts.for.today",
            ),
            ok(
                "substring with position and length",
                PATH,
                "${path_name:11:5}",
                "ideas",
            ),
            ok("default not used", &[("var", "abc")], "${var=xyz}", "abc"),
            ok("default used", NONE, "${var=xyz}", "xyz"),
            ok(
                "nested default",
                DEF,
                "something ${var=${default_var}}",
                "something foo",
            ),
            ok(
                "default with suffix",
                &[("default_var", "foo1")],
                "foo: ${var=${default_var}-suffix}",
                "foo: foo1-suffix",
            ),
            ok(
                "default with prefix and suffix",
                &[("default_var", "foo1")],
                "foo: ${var=prefix${default_var}-suffix}",
                "foo: prefixfoo1-suffix",
            ),
            ok(":= default", NONE, "${var:=xyz}", "xyz"),
            ok(
                "replace suffix",
                Z,
                "${stringZ/%abc/XYZ}",
                "abcABC123ABCXYZ",
            ),
            ok(
                "replace prefix",
                Z,
                "${stringZ/#abc/XYZ}",
                "XYZABC123ABCabc",
            ),
            ok(
                "prepend via empty prefix pattern",
                &[("stringZ", "somevalue")],
                "${stringZ/#/prefix-}",
                "prefix-somevalue",
            ),
            ok(
                "append via empty suffix pattern",
                &[("stringZ", "somevalue")],
                "${stringZ/%/-suffix}",
                "somevalue-suffix",
            ),
            ok("replace all", Z, "${stringZ//abc/xyz}", "xyzABC123ABCxyz"),
            ok("replace first", Z, "${stringZ/abc/xyz}", "xyzABC123ABCabc"),
            ok(
                "delete shortest prefix",
                FILE,
                "${filename#*.}",
                "string.txt",
            ),
            ok(
                "delete shortest prefix /",
                &[("filename", "path/to/file")],
                "${filename#*/}",
                "to/file",
            ),
            ok(
                "delete shortest prefix leading /",
                &[("filename", "/path/to/file")],
                "${filename#*/}",
                "path/to/file",
            ),
            ok("delete longest prefix", FILE, "${filename##*.}", "txt"),
            ok(
                "delete longest prefix /",
                &[("filename", "path/to/file")],
                "${filename##*/}",
                "file",
            ),
            ok(
                "delete longest prefix leading /",
                &[("filename", "/path/to/file")],
                "${filename##*/}",
                "file",
            ),
            ok(
                "delete shortest suffix",
                FILE,
                "${filename%.*}",
                "bash.string",
            ),
            ok("delete longest suffix", FILE, "${filename%%.*}", "bash"),
            ok(
                "nested operator in default",
                V01,
                "${var=${var01^^}}",
                "ABCDEFGH28IJ",
            ),
            ok("escaped", V01, "$${var01}", "${var01}"),
            ok(
                "escapes mixed",
                V01,
                "some text ${var01}$${var$${var01}$var01${var01}",
                "some text abcdEFGH28ij${var${var01}$var01abcdEFGH28ij",
            ),
            ok(
                "escaped outer, nested inner",
                DEF,
                "something $${var=${default_var}}",
                "something ${var=foo}",
            ),
            ok(
                "escaped slash in pattern",
                &[("stringZ", "foo/bar")],
                r"${stringZ/\//-}",
                "foo-bar",
            ),
            ok(
                "escaped slash in replace-all",
                &[("stringZ", "foo/bar/baz")],
                r"${stringZ//\//-}",
                "foo-bar-baz",
            ),
            ok(
                "backslashes outside are text",
                DEF,
                "\\\\something ${var=${default_var}}",
                "\\\\something foo",
            ),
            ok(
                "replace with blank",
                &[("stringZ", "foo.bar")],
                "${stringZ/./}",
                "foobar",
            ),
        ],
        false,
    );
}

const STRICT_MSG: &str = "variable not set (strict mode): \"missing\"";

/// fluxcd/pkg envsubst `TestExpandStrict`, including the flux2#5836 regressions.
#[test]
fn flux_expand_strict_table() {
    run(
        &[
            ok("text-only", NONE, "abcdEFGH28ij", "abcdEFGH28ij"),
            ok("existing", &[("foo", "bar")], "${foo}", "bar"),
            ok("existing empty", &[("foo", "")], "${foo}", ""),
            err("missing", NONE, "${missing}", STRICT_MSG),
            ok(
                "missing with := default",
                &[("foo", "bar")],
                "${missing:=default}",
                "default",
            ),
            err("length of missing", NONE, "${#missing}", STRICT_MSG),
            err("^ of missing", NONE, "${missing^}", STRICT_MSG),
            err("^^ of missing", NONE, "${missing^^}", STRICT_MSG),
            err(", of missing", NONE, "${missing,}", STRICT_MSG),
            err(",, of missing", NONE, "${missing,,}", STRICT_MSG),
            err("substr of missing", NONE, "${missing:0}", STRICT_MSG),
            err("substr len of missing", NONE, "${missing:0:10}", STRICT_MSG),
            err(
                "/ of missing",
                NONE,
                "${missing/pattern/replacement}",
                STRICT_MSG,
            ),
            err(
                "// of missing",
                NONE,
                "${missing//pattern/replacement}",
                STRICT_MSG,
            ),
            err(
                "/# of missing",
                NONE,
                "${missing/#pattern/replacement}",
                STRICT_MSG,
            ),
            err(
                "/% of missing",
                NONE,
                "${missing/%pattern/replacement}",
                STRICT_MSG,
            ),
            err("# of missing", NONE, "${missing#pattern}", STRICT_MSG),
            err("## of missing", NONE, "${missing##pattern}", STRICT_MSG),
            err("% of missing", NONE, "${missing%pattern}", STRICT_MSG),
            err("%% of missing", NONE, "${missing%%pattern}", STRICT_MSG),
            ok(":- of missing", NONE, "${missing:-fallback}", "fallback"),
            ok(":= of missing", NONE, "${missing:=assigned}", "assigned"),
            ok("= of missing", NONE, "${missing=assigned}", "assigned"),
        ],
        true,
    );
}

/// Strict and non-strict side by side on the cases where they differ or where Flux's
/// default operators behave unlike bash.
#[test]
fn strict_and_lenient_semantics() {
    let lenient = [
        ok("missing reads empty", NONE, "a${missing}b", "ab"),
        ok("length of missing is 0", NONE, "${#missing}", "0"),
        ok(
            "unused default may reference missing",
            &[("foo", "bar")],
            "${foo:=${missing}}",
            "bar",
        ),
        ok(
            ":+ is a plain default (set)",
            &[("foo", "bar")],
            "${foo:+alt}",
            "bar",
        ),
        ok(
            ":? is a plain default (unset)",
            NONE,
            "${foo:?oops}",
            "oops",
        ),
        ok(
            "empty but set takes the default",
            &[("foo", "")],
            "${foo:-d}",
            "d",
        ),
        ok(
            "= also defaults an empty value",
            &[("foo", "")],
            "${foo=d}",
            "d",
        ),
        ok("digits are a name", NONE, "${1}x", "x"),
    ];
    run(&lenient, false);
    let strict = [
        err("missing fails", NONE, "a${missing}b", STRICT_MSG),
        // Arguments are evaluated first, so an unused default still fails in strict mode.
        err(
            "unused default referencing missing",
            &[("foo", "bar")],
            "${foo:=${missing}}",
            STRICT_MSG,
        ),
        ok(
            "used default referencing a set var",
            &[("b", "x")],
            "${missing:-${b}}",
            "x",
        ),
        ok("nested defaults", NONE, "${a:-${b:-${c:=deep}}}", "deep"),
        ok(":+ on missing", NONE, "${missing:+alt}", "alt"),
        ok(
            ":+ on set is the value",
            &[("foo", "bar")],
            "${foo:+alt}",
            "bar",
        ),
        ok(":? on missing", NONE, "${missing:?message}", "message"),
        ok("empty but set, bare", &[("foo", "")], "[${foo}]", "[]"),
        ok("empty but set takes :-", &[("foo", "")], "${foo:-d}", "d"),
        ok("empty default", NONE, "[${missing:-}]", "[]"),
        ok("empty := default", NONE, "[${missing:=}]", "[]"),
        ok("= on missing", NONE, "${missing=x}", "x"),
        err(
            "digit names are looked up",
            NONE,
            "${1}",
            "variable not set (strict mode): \"1\"",
        ),
        err(
            "first failure wins",
            NONE,
            "${a} ${b}",
            "variable not set (strict mode): \"a\"",
        ),
    ];
    run(&strict, true);
}

/// Texts the parser rejects, with Flux's messages; in both modes.
#[test]
fn syntax_errors() {
    let cases = [
        err(
            "unterminated",
            &[("foo", "x")],
            "${foo",
            "missing closing brace",
        ),
        err(
            "bash - is not supported",
            &[("v", "x")],
            "${v-d}",
            "missing closing brace",
        ),
        err(
            "bash + is not supported",
            &[("v", "x")],
            "${v+d}",
            "missing closing brace",
        ),
        err(
            "bash ? is not supported",
            &[("v", "x")],
            "${v?d}",
            "missing closing brace",
        ),
        err("space in name", NONE, "${foo bar}", "missing closing brace"),
        err("array syntax", NONE, "${AUTH[@]}", "missing closing brace"),
        err("empty braces", NONE, "${}", "unable to parse variable name"),
        err("bare open", NONE, "x ${", "unable to parse variable name"),
        err(
            "operator first",
            NONE,
            "${:-x}",
            "unable to parse variable name",
        ),
        err(
            "empty substr",
            &[("a", "x")],
            "${a:}",
            "unable to parse substitution within function",
        ),
        err(
            "empty trim pattern",
            &[("a", "x")],
            "${a#}",
            "unable to parse substitution within function",
        ),
        err(
            "unterminated default",
            NONE,
            "${a:-b",
            "unable to parse substitution within function",
        ),
        err("length without name", NONE, "${#}", "bad substitution"),
        err(
            "casing with junk",
            &[("a", "x")],
            "${a^x}",
            "bad substitution",
        ),
        err(
            "replace without delimiter",
            &[("a", "x")],
            "${a/b",
            "bad substitution",
        ),
        err(
            "replace unterminated",
            &[("a", "x")],
            "${a/b/c",
            "bad substitution",
        ),
        err(
            "trim followed by text",
            &[("a", "x")],
            "${a#x${b}y}",
            "bad substitution",
        ),
        err(
            "substr with trailing junk",
            &[("a", "x"), ("b", "1")],
            "${a:1${b}}",
            "bad substitution",
        ),
    ];
    run(&cases, false);
    run(&cases, true);
}

/// Parser behaviours from parse_test.go and the scanner, checked through their output.
#[test]
fn parser_quirks() {
    run(
        &[
            ok("closing brace alone is text", NONE, "}text", "}text"),
            ok(
                "double slash is text",
                NONE,
                "http://github.com",
                "http://github.com",
            ),
            ok("$$ before a name", NONE, "$$string", "$string"),
            ok(
                "$var is literal",
                &[("var", "x")],
                "$var and ${var}",
                "$var and x",
            ),
            ok(
                "$(cmd) and $1 are literal",
                NONE,
                "$(date) $1 $",
                "$(date) $1 $",
            ),
            ok(
                "windows pipe",
                NONE,
                r"\\.\pipe\pipename",
                r"\\.\pipe\pipename",
            ),
            ok("four dollars", &[("x", "v")], "$$$${x}", "$${x}"),
            ok("three dollars", &[("x", "v")], "$$${x}", "$v"),
            ok("trailing dollars", NONE, "a$$", "a$"),
            ok(
                "special characters in trim pattern",
                &[("string", "$%:x{rest")],
                "${string#$%:*{}",
                "rest",
            ),
            ok(
                "escaped slash in pattern",
                &[("string", "/position/x")],
                r"${string/\/position/length}",
                "length/x",
            ),
            ok(
                "escaped backslash in pattern",
                &[("string", "a/position\\b")],
                r"${string/\/position\\/length}",
                "alengthb",
            ),
            ok(
                "escaped slash in replacement",
                &[("string", "position")],
                r"${string/position/\/length}",
                "/length",
            ),
            ok(
                "escaped backslash in replacement",
                &[("string", "position")],
                r"${string/position/\/leng\\th}",
                "/leng\\th",
            ),
            ok(
                "dollar escape inside pattern",
                &[("v", "5$")],
                "${v/$$/USD}",
                "5USD",
            ),
            ok(
                "no escapes in defaults",
                NONE,
                r"${missing:-a\/b$$c}",
                r"a\/b$$c",
            ),
            ok(
                "substr position from a variable",
                &[("string", "abcdef"), ("position", "2")],
                "${string:${position}}",
                "cdef",
            ),
            ok(
                "substr arguments from functions",
                &[("string", "abcdefgh"), ("stringy", "2"), ("stringz", "3")],
                "${string:${stringy:position:length}:${stringz,,}}",
                "cde",
            ),
            ok(
                "trim pattern from a variable",
                &[("string", "prefix-rest"), ("stringz", "prefix-")],
                "${string#${stringz}}",
                "rest",
            ),
            ok(
                "default from a variable",
                &[("stringz", "z")],
                "${string=${stringz}}",
                "z",
            ),
            ok(
                "default prefix and variable",
                &[("var", "v")],
                "${string=prefix-${var}}",
                "prefix-v",
            ),
            ok(
                "default variable and suffix",
                &[("var", "v")],
                "${string=${var}-suffix}",
                "v-suffix",
            ),
            ok(
                "default with both sides",
                &[("var", "v")],
                "${string=prefix-${var}-suffix}",
                "prefix-v-suffix",
            ),
            ok(
                "default with space",
                &[("var", "v")],
                "${string=prefix${var} suffix}",
                "prefixv suffix",
            ),
            ok(
                "replace from variables",
                &[("string", "a.b.c"), ("stringy", "."), ("stringz", "-")],
                "${string//${stringy}/${stringz}}",
                "a-b-c",
            ),
            ok(
                "text around",
                &[("string", "four")],
                "hello ${#string} world",
                "hello 4 world",
            ),
            ok(
                "backslashes around",
                &[("string", "four")],
                r"\\ hello ${#string} world \\",
                r"\\ hello 4 world \\",
            ),
            ok(
                "double colon is one delimiter",
                &[("v", "abcdef")],
                "${v:1::2}",
                "bc",
            ),
            ok("brace inside a default", NONE, "${a:-{b}}", "{b}"),
            ok(
                "/# without replacement keeps the value",
                &[("v", "abc")],
                "${v/#a/}",
                "abc",
            ),
            ok(
                "/% without replacement keeps the value",
                &[("v", "abc")],
                "${v/%c/}",
                "abc",
            ),
            ok(
                "/ without replacement deletes",
                &[("v", "abc")],
                "${v/b/}",
                "ac",
            ),
            ok("// with empty pattern", &[("v", "ab")], "${v///-}", "-a-b-"),
            ok(
                "unknown casing mix is the value",
                &[("v", "aB")],
                "${v,^}",
                "aB",
            ),
            ok(
                "negative substr offset",
                &[("v", "hello")],
                "${v:-3}",
                "hello",
            ),
            ok(
                "negative offset needs a space in bash, not here",
                &[("v", "hello")],
                "${v: -3}",
                "hello",
            ),
            ok(
                "negative offset via zero",
                &[("v", "hello")],
                "${v:0:-1}",
                "hell",
            ),
            ok(
                "NUL ends the text, as Go's scanner does",
                &[("v", "x")],
                "a${v}\0b${v}",
                "ax",
            ),
            ok(
                "multi-line text",
                &[("size", "10Gi")],
                "a:\n  b: ${size}\n  c: $${size}\n",
                "a:\n  b: 10Gi\n  c: ${size}\n",
            ),
        ],
        false,
    );
}

/// Patterns: `#`/`%` take shell globs, `/` takes literal text.
#[test]
fn patterns() {
    run(
        &[
            ok("glob ? in prefix", &[("v", "v1.2.3")], "${v#v?}", ".2.3"),
            ok("glob class", &[("v", "a1b2")], "${v##[a-z]}", "1b2"),
            ok("negated class", &[("v", "1abc")], "${v#[^a-z]}", "abc"),
            ok("star crosses slashes", &[("v", "a/b/c")], "${v##*/}", "c"),
            ok("shortest star is one byte", &[("v", "abc")], "${v#*}", "bc"),
            ok("longest star is everything", &[("v", "abc")], "${v##*}", ""),
            ok("suffix star", &[("v", "abc")], "${v%*}", "ab"),
            ok(
                "class reversed for suffixes never matches",
                &[("v", "a.tar.gz")],
                "${v%[.]*}",
                "a.tar.gz",
            ),
            ok(
                "no match keeps the value",
                &[("v", "abc")],
                "${v#x*}",
                "abc",
            ),
            ok(
                "malformed pattern keeps the value",
                &[("v", "abc")],
                "${v#[}",
                "abc",
            ),
            ok(
                "replace is literal, not glob",
                &[("v", "a*c abc")],
                "${v/*/-}",
                "a-c abc",
            ),
            ok(
                "replace-all is literal",
                &[("v", "a.b.c")],
                "${v//./}",
                "abc",
            ),
            ok(
                "image tag from a ref",
                &[("image", "ghcr.io/org/app:1.2.3")],
                "${image##*:}",
                "1.2.3",
            ),
            ok(
                "image name from a ref",
                &[("image", "ghcr.io/org/app:1.2.3")],
                "${image%%:*}",
                "ghcr.io/org/app",
            ),
        ],
        false,
    );
}

/// Values and names outside ASCII: case functions map characters; `#` and `:` count bytes as Go does.
#[test]
fn unicode() {
    run(
        &[
            ok("text around", &[("v", "x")], "日本 ${v} 語", "日本 x 語"),
            ok("unicode value", &[("v", "größe")], "${v}", "größe"),
            ok("upper first", &[("v", "élan")], "${v^}", "Élan"),
            ok("upper all keeps ß", &[("v", "straße")], "${v^^}", "STRAßE"),
            ok("lower all", &[("v", "ÉLAN")], "${v,,}", "élan"),
            ok("length counts bytes", &[("v", "é")], "${#v}", "2"),
            ok("substr on a boundary", &[("v", "éa")], "${v:2}", "a"),
            err(
                "substr inside a character",
                &[("v", "é")],
                "${v:1}",
                "substitution produced invalid UTF-8 (a byte-offset operator split a multi-byte character)",
            ),
            ok("unicode names", &[("größe", "10Gi")], "${größe}", "10Gi"),
            ok("unicode pattern", &[("v", "größe")], "${v/ö/oe}", "groeße"),
            ok("unicode glob, longest", &[("v", "ßx")], "${v##?}", "x"),
            // Go tries byte prefixes: `?` matches the lone first byte of `ß`.
            err(
                "unicode glob, shortest splits a character",
                &[("v", "ßx")],
                "${v#?}",
                "substitution produced invalid UTF-8 (a byte-offset operator split a multi-byte character)",
            ),
        ],
        false,
    );
}

fn config_map(data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// Sources, inline `substitute`, expected error text.
type CollectCase = (
    Vec<VarSource>,
    Option<BTreeMap<String, String>>,
    &'static str,
);

#[test]
fn collect_variables_order_and_rules() {
    let secret = Secret {
        data: Some(BTreeMap::from([
            ("SIZE".to_owned(), ByteString(b"20Gi".to_vec())),
            ("TOKEN".to_owned(), ByteString(b"line1\nline2\n".to_vec())),
        ])),
        string_data: Some(BTreeMap::from([("EXTRA".to_owned(), "s".to_owned())])),
        ..Secret::default()
    };
    let cm = config_map(&[("SIZE", "10Gi"), ("CLASS", "fast\n"), ("REGION", "eu")]);
    let inline = BTreeMap::from([("REGION".to_owned(), "us\n".to_owned())]);
    let sources = [
        VarSource::from_config_map("cluster-vars", false, Some(&cm)),
        VarSource::from_secret("cluster-secrets", false, Some(&secret)),
        VarSource::from_config_map("absent", true, None),
        VarSource::from_secret("absent-secret", true, None),
    ];
    let got = collect_variables(&sources, Some(&inline)).map_err(|e| e.to_string());
    let want = vars(&[
        ("SIZE", "20Gi"),
        ("CLASS", "fast"),
        ("REGION", "us"),
        ("TOKEN", "line1line2"),
        ("EXTRA", "s"),
    ]);
    assert_eq!(got, Ok(want));

    let none = collect_variables(&[], None).map_err(|e| e.to_string());
    assert_eq!(none, Ok(Variables::new()));

    let cases: &[CollectCase] = &[
        (
            vec![VarSource::from_config_map("vars", false, None)],
            None,
            "substitute from 'ConfigMap/vars' error: configmaps \"vars\" not found",
        ),
        (
            vec![VarSource::from_secret("creds", false, None)],
            None,
            "substitute from 'Secret/creds' error: secrets \"creds\" not found",
        ),
        (
            vec![VarSource::from_config_map(
                "bad",
                false,
                Some(&config_map(&[("my-var", "x")])),
            )],
            None,
            "'my-var' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'",
        ),
        (
            vec![],
            Some(BTreeMap::from([("1abc".to_owned(), "x".to_owned())])),
            "'1abc' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'",
        ),
        (
            vec![],
            Some(BTreeMap::from([("größe".to_owned(), "x".to_owned())])),
            "'größe' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'",
        ),
    ];
    for (sources, inline, want) in cases {
        let got = collect_variables(sources, inline.as_ref()).map_err(|e| e.to_string());
        assert_eq!(got, Err((*want).to_owned()));
    }
    let ok_names = vars(&[("_a", "1"), ("A_1", "2"), ("cluster_env", "3")]);
    let inline: BTreeMap<String, String> = ok_names.clone();
    assert_eq!(collect_variables(&[], Some(&inline)), Ok(ok_names));
    assert_eq!("Secret".parse::<VarSourceKind>(), Ok(VarSourceKind::Secret));
    assert_eq!(
        "Foo".parse::<VarSourceKind>().map_err(|e| e.to_string()),
        Err("substituteFrom kind 'Foo' is not supported, must be ConfigMap or Secret".to_owned())
    );
}

fn statefulset(size: &str, metadata_extra: serde_json::Value) -> serde_json::Value {
    let mut metadata = json!({"name": "web", "namespace": "db"});
    if let (Some(m), Some(extra)) = (metadata.as_object_mut(), metadata_extra.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {
            "replicas": 2,
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"resources": {"requests": {"storage": size}}}
            }]
        }
    })
}

const STRICT: Options = Options {
    strict: true,
    always: false,
};

#[test]
fn substitute_object_like_kustomize_controller() {
    let sizes = vars(&[("SIZE", "20Gi")]);
    let obj = statefulset("${SIZE}", json!({}));
    let got = substitute_object(&obj, &sizes, &STRICT);
    assert_eq!(got, Ok(statefulset("20Gi", json!({}))));

    let defaulted = statefulset("${SIZE:=10Gi}", json!({}));
    assert_eq!(
        substitute_object(&defaulted, &Variables::new(), &STRICT),
        Ok(defaulted.clone()),
        "no variables: substitution is skipped entirely"
    );
    let always = Options {
        strict: true,
        always: true,
    };
    assert_eq!(
        substitute_object(&defaulted, &Variables::new(), &always),
        Ok(statefulset("10Gi", json!({}))),
        "substituteStrategy Always runs with no variables"
    );

    let missing = statefulset("${MISSING}", json!({}));
    assert_eq!(
        substitute_object(&missing, &sizes, &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'StatefulSet/db/web': envsubst error: variable substitution failed: variable not set (strict mode): \"MISSING\"".to_owned())
    );
    let lenient = Options {
        strict: false,
        always: false,
    };
    // `storage: ` is an empty plain scalar: null, as Flux's YAML round trip gives.
    let mut nulled = statefulset("", json!({}));
    nulled["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
        serde_json::Value::Null;
    assert_eq!(substitute_object(&missing, &sizes, &lenient), Ok(nulled));

    for opt_out in [
        json!({"labels": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}),
        json!({"annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}),
    ] {
        let obj = statefulset("${MISSING}", opt_out.clone());
        assert_eq!(substitute_object(&obj, &sizes, &always), Ok(obj.clone()));
    }
    let not_disabled = statefulset(
        "${SIZE}",
        json!({"annotations": {"kustomize.toolkit.fluxcd.io/substitute": "enabled"}}),
    );
    assert_eq!(
        substitute_object(&not_disabled, &sizes, &STRICT),
        Ok(statefulset(
            "20Gi",
            json!({"annotations": {"kustomize.toolkit.fluxcd.io/substitute": "enabled"}})
        ))
    );

    let bad_syntax = statefulset("${SIZE", json!({}));
    assert_eq!(
        substitute_object(&bad_syntax, &sizes, &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'StatefulSet/db/web': envsubst error: variable substitution failed: missing closing brace".to_owned())
    );
    let bad_name = vars(&[("bad-name", "x")]);
    assert_eq!(
        substitute_object(&obj, &bad_name, &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'StatefulSet/db/web': envsubst error: 'bad-name' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'".to_owned())
    );
}

#[test]
fn substitute_object_keeps_every_other_value() {
    let obj = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scripts"},
        "data": {
            "script.sh": "#!/bin/sh\necho \"$${HOME}\" $PATH\nexit 0\n",
            "quoted": "it's \"${WHO}\": ok",
            "yes": "yes",
            "octal": "0755",
            "number": "10",
            "empty": "",
            "long": "word ".repeat(40),
            "colon": "a: ${WHO}",
            "backslash": "C:\\dir\\${WHO}"
        },
        "binaryData": {},
        "list": [1, 2.5, true, null, {"nested": ["${WHO}"]}]
    });
    let got = substitute_object(&obj, &vars(&[("WHO", "me")]), &STRICT);
    let mut want = obj.clone();
    want["data"]["script.sh"] = json!("#!/bin/sh\necho \"${HOME}\" $PATH\nexit 0\n");
    want["data"]["quoted"] = json!("it's \"me\": ok");
    want["data"]["colon"] = json!("a: me");
    want["data"]["backslash"] = json!("C:\\dir\\me");
    want["list"][4]["nested"][0] = json!("me");
    assert_eq!(got, Ok(want));
}

#[test]
fn substitute_document_follows_the_source_quoting() {
    let doc = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\n  namespace: db\nspec:\n  replicas: ${REPLICAS}\n  serviceName: \"${REPLICAS}\"\n  template:\n    metadata:\n      labels:\n        enabled: ${FLAG}\n";
    let v = vars(&[("REPLICAS", "3"), ("FLAG", "yes")]);
    let got = substitute_document(doc, &v, &STRICT);
    let want = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "3",
            "template": {"metadata": {"labels": {"enabled": true}}}
        }
    });
    assert_eq!(got, Ok(want));

    let disabled = "kind: ConfigMap\nmetadata:\n  name: raw\n  labels:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\ndata:\n  a: ${NOPE}\n";
    assert_eq!(
        substitute_document(disabled, &v, &STRICT),
        Ok(
            json!({"kind": "ConfigMap", "metadata": {"name": "raw", "labels": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}, "data": {"a": "${NOPE}"}})
        )
    );

    let breaks_yaml = "kind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"${QUOTE}\"\n";
    let got = substitute_document(breaks_yaml, &vars(&[("QUOTE", "x\"y")]), &STRICT);
    match got {
        Err(SubstituteError::Object { object, reason }) => {
            assert_eq!(object, "ConfigMap/cm");
            assert!(matches!(*reason, SubstituteError::Yaml { .. }), "{reason}");
        }
        other => panic!("want a YAML error, got {other:?}"),
    }

    let enabled = "kind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    kustomize.toolkit.fluxcd.io/substitute: enabled\ndata:\n  a: ${NOPE}\n";
    assert_eq!(
        substitute_document(enabled, &v, &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'ConfigMap/cm': envsubst error: variable substitution failed: variable not set (strict mode): \"NOPE\"".to_owned())
    );
    // Flux checks names for every substituted object, even one without any `${`.
    let plain = "kind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  a: b\n";
    assert_eq!(
        substitute_document(plain, &vars(&[("a.b", "x")]), &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'ConfigMap/plain': envsubst error: 'a.b' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'".to_owned())
    );
    assert_eq!(
        substitute_document(plain, &Variables::new(), &STRICT),
        Ok(json!({"kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"a": "b"}}))
    );

    assert!(matches!(
        substitute_document("a: [", &v, &STRICT),
        Err(SubstituteError::Document { .. })
    ));
}

#[test]
fn streams_are_substituted_per_object() {
    use flux_converger::flux::substitute::{split_documents, substitute_stream};

    assert_eq!(
        split_documents("a: 1\n---\nb: 2\n"),
        vec!["a: 1\n", "b: 2\n"]
    );
    assert_eq!(
        split_documents("---\na: 1\n--- \t\nb: 2"),
        vec!["", "a: 1\n", "b: 2"]
    );
    assert_eq!(split_documents("a: |\n  ---\n"), vec!["a: |\n  ---\n"]);
    assert_eq!(
        split_documents("a: --- x\n----\n"),
        vec!["a: --- x\n----\n"]
    );
    assert_eq!(split_documents(""), vec![""]);

    let stream = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: apps\ndata:\n  size: ${SIZE}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\n  namespace: apps\n  annotations:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\ndata:\n  script: echo ${HOME}\n---\n";
    let got = substitute_stream(stream, &vars(&[("SIZE", "5Gi")]), &STRICT);
    assert_eq!(
        got,
        Ok(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "apps"}, "data": {"size": "5Gi"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "raw", "namespace": "apps", "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}, "data": {"script": "echo ${HOME}"}}),
        ])
    );
    let failing = stream.replace("${SIZE}", "${NOT_SET}");
    assert_eq!(
        substitute_stream(&failing, &vars(&[("SIZE", "5Gi")]), &STRICT).map_err(|e| e.to_string()),
        Err("post build failed for 'ConfigMap/apps/a': envsubst error: variable substitution failed: variable not set (strict mode): \"NOT_SET\"".to_owned())
    );
}

/// The real input of Flux's substitution is kustomize's output; build one with `kubectl
/// kustomize` and check that substituting the text and substituting the parsed objects agree.
#[test]
fn kustomize_output_round_trip() {
    use flux_converger::flux::substitute::{split_documents, substitute_stream};

    let dir = tempfile::tempdir().expect("temp dir");
    let sts = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: ${REPLICAS:=2}
  serviceName: "${SVC}"
  template:
    spec:
      containers:
      - name: c
        command: ["sh", "-c", "echo $${HOME} ${GREETING}"]
        args:
        - |
          multi ${GREETING}
          line
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      resources:
        requests:
          storage: ${SIZE}
"#;
    std::fs::write(dir.path().join("sts.yaml"), sts).expect("write sts.yaml");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources:\n- sts.yaml\nnamespace: db\n",
    )
    .expect("write kustomization.yaml");
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", "--load-restrictor=LoadRestrictionsNone"])
        .arg(dir.path())
        .output()
        .expect("kubectl must be installed for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stream = String::from_utf8(out.stdout).expect("kustomize prints UTF-8");

    let v = vars(&[("SVC", "web"), ("GREETING", "hi"), ("SIZE", "10Gi")]);
    let from_text = substitute_stream(&stream, &v, &STRICT).expect("substitutes");
    let want = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "db"},
        "spec": {
            "replicas": 2,
            "serviceName": "web",
            "template": {"spec": {"containers": [{
                "args": ["multi hi\nline\n"],
                "command": ["sh", "-c", "echo ${HOME} hi"],
                "name": "c"
            }]}},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"resources": {"requests": {"storage": "10Gi"}}}
            }]
        }
    });
    assert_eq!(from_text, vec![want.clone()]);

    let parsed: Vec<serde_json::Value> = split_documents(&stream)
        .into_iter()
        .map(|doc| serde_saphyr::from_str(doc).expect("kustomize output parses"))
        .collect();
    let from_objects: Vec<serde_json::Value> = parsed
        .iter()
        .map(|o| substitute_object(o, &v, &STRICT).expect("substitutes"))
        .collect();
    assert_eq!(from_objects, vec![want]);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Characters that exercise every branch of the scanner, including multi-byte ones.
    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop::sample::select(vec![
                '$', '{', '}', ':', '-', '=', '#', '%', '/', '\\', '^', ',', '?', '+', '*', '[',
                ']', 'a', 'b', '_', '1', ' ', '\n', 'é', 'ß', '日',
            ]),
            0..40,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn never_panics(input in text(), strict in any::<bool>()) {
            let v = vars(&[("a", "aé1"), ("b", ""), ("_", "/x/")]);
            let _ = envsubst(&input, &v, strict);
        }

        #[test]
        fn text_without_dollar_is_unchanged(input in text(), strict in any::<bool>()) {
            let input = input.replace('$', "");
            prop_assert_eq!(envsubst(&input, &Variables::new(), strict), Ok(input.clone()));
        }

        #[test]
        fn escaped_reference_is_literal(name in "[A-Za-z_][A-Za-z0-9_]{0,8}", strict in any::<bool>()) {
            let input = format!("x $${{{name}}} y");
            prop_assert_eq!(envsubst(&input, &Variables::new(), strict), Ok(format!("x ${{{name}}} y")));
        }

        #[test]
        fn set_variables_expand(name in "[A-Za-z_][A-Za-z0-9_]{0,8}", value in "[^\\x00]{0,12}") {
            let v = vars(&[(name.as_str(), value.as_str())]);
            let input = format!("<${{{name}}}>");
            prop_assert_eq!(envsubst(&input, &v, true), Ok(format!("<{value}>")));
        }
    }
}

/// fluxcd/pkg `TestKustomizationVarsub`: its testdata built with `kubectl kustomize`, variables
/// from the `app-vars` ConfigMap and the inline `substitute`, compared with its expected YAML.
#[test]
fn flux_kustomization_varsub_testdata() {
    use flux_converger::flux::substitute::substitute_stream;

    let dir = tempfile::tempdir().expect("temp dir");
    let files = [
        (
            "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: apps\nresources:\n- ./deployment.yaml\n- ./config.yaml\n",
        ),
        (
            "deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  namespace: apps\n  labels:\n    environment: ${cluster_env:=dev}\n    region: ${cluster_region}\nspec:\n  selector:\n    matchLabels:\n      app: app\n  template:\n    metadata:\n      annotations:\n        prometheus.io/scrape: ${prometheus_scrape:=false}\n        prometheus.io/port: ${prometheus_port}\n      labels:\n        app: app\n    spec:\n      containers:\n      - name: nginx\n        image: ${image}\n        imagePullPolicy: IfNotPresent\n        resources:\n          limits:\n            cpu: 2000m\n            memory: 512Mi\n          requests:\n            cpu: 100m\n            memory: 64Mi\n",
        ),
        (
            "config.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\n    environment: ${cluster_env:=dev}\n    region: ${cluster_region}\n  name: app-vars\n  namespace: apps\ndata:\n  prometheus_scrape: ${prometheus_scrape:=false}\n  prometheus_port: ${prometheus_port}\n  image: ${image}\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write testdata");
    }
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", "--load-restrictor=LoadRestrictionsNone"])
        .arg(dir.path())
        .output()
        .expect("kubectl must be installed for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stream = String::from_utf8(out.stdout).expect("kustomize prints UTF-8");

    // testdata/configmap.yaml and the Kustomization's postBuild.substitute.
    let app_vars = config_map(&[
        ("prometheus_scrape", "\"true\""),
        ("prometheus_port", "\"9797\""),
        ("image", "nginx:1.21.4"),
    ]);
    let inline = BTreeMap::from([
        ("cluster_env".to_owned(), "prod".to_owned()),
        ("cluster_region".to_owned(), "eu-central-1".to_owned()),
    ]);
    let v = collect_variables(
        &[VarSource::from_config_map(
            "app-vars",
            false,
            Some(&app_vars),
        )],
        Some(&inline),
    )
    .expect("variables");
    let got = substitute_stream(&stream, &v, &STRICT).expect("substitutes");

    // testdata/kustomization_varsub_expected.yaml
    let expected = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  labels:\n    environment: prod\n    region: eu-central-1\n  name: app\n  namespace: apps\nspec:\n  selector:\n    matchLabels:\n      app: app\n  template:\n    metadata:\n      annotations:\n        prometheus.io/port: \"9797\"\n        prometheus.io/scrape: \"true\"\n      labels:\n        app: app\n    spec:\n      containers:\n      - image: nginx:1.21.4\n        imagePullPolicy: IfNotPresent\n        name: nginx\n        resources:\n          limits:\n            cpu: 2000m\n            memory: 512Mi\n          requests:\n            cpu: 100m\n            memory: 64Mi\n---\napiVersion: v1\ndata:\n  image: ${image}\n  prometheus_port: ${prometheus_port}\n  prometheus_scrape: ${prometheus_scrape:=false}\nkind: ConfigMap\nmetadata:\n  labels:\n    environment: ${cluster_env:=dev}\n    kustomize.toolkit.fluxcd.io/substitute: disabled\n    region: ${cluster_region}\n  name: app-vars\n  namespace: apps\n";
    let mut want: Vec<serde_json::Value> = expected
        .split("---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("expected YAML parses"))
        .collect();
    // kubectl's kustomize orders ConfigMaps first; Flux's build keeps file order.
    let mut got = got;
    let by_kind = |o: &serde_json::Value| o["kind"].as_str().unwrap_or_default().to_owned();
    got.sort_by_key(by_kind);
    want.sort_by_key(by_kind);
    assert_eq!(got, want);
}

#[test]
fn var_sources_from_json_objects() {
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "data": {"PASSWORD": "czNjcjN0", "CERT": "bGluZTEKbGluZTIK"},
        "stringData": {"USER": "admin"}
    });
    let got = VarSource::from_object(VarSourceKind::Secret, "creds", false, Some(&secret));
    assert_eq!(
        got.as_ref().map(|s| s.data.clone()),
        Ok(Some(BTreeMap::from([
            ("CERT".to_owned(), "line1\nline2\n".to_owned()),
            ("PASSWORD".to_owned(), "s3cr3t".to_owned()),
            ("USER".to_owned(), "admin".to_owned()),
        ])))
    );
    let vars = collect_variables(&[got.expect("secret")], None);
    assert_eq!(
        vars.map(|v| v.get("CERT").cloned()),
        Ok(Some("line1line2".to_owned()))
    );

    let cm = json!({"kind": "ConfigMap", "metadata": {"name": "v"}, "data": {"A": "1"}, "binaryData": {"B": "AAE="}});
    assert_eq!(
        VarSource::from_object(VarSourceKind::ConfigMap, "v", true, Some(&cm)).map(|s| s.data),
        Ok(Some(BTreeMap::from([("A".to_owned(), "1".to_owned())])))
    );
    assert_eq!(
        VarSource::from_object(VarSourceKind::ConfigMap, "v", true, None).map(|s| s.data),
        Ok(None)
    );
    let bad_base64 = json!({"kind": "Secret", "data": {"A": "not base64!"}});
    assert!(matches!(
        VarSource::from_object(VarSourceKind::Secret, "s", false, Some(&bad_base64)),
        Err(SubstituteError::Invalid(msg)) if msg.starts_with("substitute from 'Secret/s': ")
    ));
    assert_eq!(
        VarSource::from_object(VarSourceKind::Secret, "v", false, Some(&cm))
            .map_err(|e| e.to_string()),
        Err("substitute from 'Secret/v': the object is a ConfigMap, not a Secret".to_owned())
    );
}

#[test]
fn nesting_depth() {
    let nested = |depth: usize| format!("{}x{}", "${a:-".repeat(depth), "}".repeat(depth));
    assert_eq!(
        envsubst(&nested(200), &Variables::new(), true),
        Ok("x".to_owned())
    );
    assert_eq!(
        envsubst(&nested(100_000), &Variables::new(), true).map_err(|e| e.to_string()),
        Err("substitutions nested deeper than 256 levels".to_owned())
    );
}

/// An object the render accepts (nested deeper than serde-saphyr's default depth of 64) must
/// substitute too: the re-parse after substitution uses the same budget and stack as the render.
#[test]
fn a_deep_object_substitutes_with_the_renders_budget() {
    let mut value = json!("${SIZE}");
    for level in 0..150 {
        value = json!({ format!("l{level}"): value });
    }
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "deep", "namespace": "default"},
        "data": {"tree": "x"},
        "deep": value,
    });
    let out = substitute_object(&object, &vars(&[("SIZE", "2Gi")]), &Options::default())
        .expect("deep object substitutes");
    let mut at = &out["deep"];
    for level in (0..150).rev() {
        at = &at[format!("l{level}")];
    }
    assert_eq!(at, "2Gi");
}

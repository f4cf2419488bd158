//! The manual names what exists: every relative link of the README and
//! `docs/` (and its `#anchor`) leads somewhere, and every `allocsoak`
//! command they or the Justfile show, with its subcommands and flags, and
//! every `just` recipe they name, is one the tools have.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The README and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// What `allocsoak <path> --help` lists: its subcommands, and its flags,
/// each with whether it takes a value.
#[derive(Clone, Default)]
struct Help {
    commands: BTreeSet<String>,
    flags: BTreeMap<String, bool>,
}

fn help(path: &[String], cache: &mut BTreeMap<Vec<String>, Help>) -> Help {
    if !cache.contains_key(path) {
        let out = common::allocsoak()
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut help = Help::default();
        let mut in_commands = false;
        for line in text.lines() {
            if line.ends_with(':') && !line.starts_with(' ') {
                in_commands = line == "Commands:";
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if in_commands {
                if let Some(c) = words.first() {
                    help.commands.insert(c.to_string());
                }
                continue;
            }
            for (i, w) in words.iter().enumerate() {
                if let Some(flag) = w.strip_prefix("--") {
                    let flag = flag.trim_end_matches(',');
                    let value = words.get(i + 1).is_some_and(|n| n.starts_with('<'));
                    help.flags.insert(flag.to_string(), value);
                    break;
                }
            }
        }
        cache.insert(path.to_vec(), help);
    }
    cache[path].clone()
}

/// The code in a markdown page: its fenced blocks' lines and its inline
/// code spans, lines continued with `\` joined.
fn code(text: &str) -> Vec<String> {
    let mut code = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            code.push(line.to_string());
            continue;
        }
        let spans: Vec<&str> = line.split('`').collect();
        code.extend(spans.iter().skip(1).step_by(2).map(|s| s.to_string()));
    }
    let mut joined: Vec<String> = Vec::new();
    let mut continued = false;
    for line in code {
        match joined.last_mut() {
            Some(last) if continued => last.push_str(&line),
            _ => joined.push(line),
        }
        continued = joined.last().unwrap().trim_end().ends_with('\\');
        if continued {
            let last = joined.last_mut().unwrap();
            last.truncate(last.trim_end().len() - 1);
        }
    }
    joined
}

/// The words after each standalone `word` in `line`, to the end of its
/// command (a comment, a pipe, `&&`, `;`, a redirection).
fn commands_of<'a>(line: &'a str, word: &str) -> Vec<Vec<&'a str>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut found = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w != word {
            continue;
        }
        let args = words[i + 1..]
            .iter()
            .take_while(|a| {
                !["#", "|", "&&", ";", ">", ">>", "2>&1"].contains(a) && !a.starts_with('#')
            })
            .copied()
            .collect();
        found.push(args);
    }
    found
}

/// What is wrong with one `allocsoak` command line, if anything.
fn check_command(args: &[&str], cache: &mut BTreeMap<Vec<String>, Help>) -> Option<String> {
    let mut path: Vec<String> = Vec::new();
    let mut args = args
        .iter()
        .map(|a| a.trim_matches(|c| "[]().,".contains(c)));
    let mut positional = false;
    while let Some(arg) = args.next() {
        if arg.is_empty() || arg.starts_with("{{") || arg.starts_with('<') || arg == "..." {
            continue;
        }
        let help = help(&path, cache);
        if let Some(flag) = arg.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap();
            match help.flags.get(flag) {
                Some(true) if !arg.contains('=') => {
                    args.next();
                }
                Some(_) => {}
                None => return Some(format!("`allocsoak {}` has no `--{flag}`", path.join(" "))),
            }
        } else if arg.starts_with('-') {
            continue;
        } else if !positional && help.commands.contains(arg) {
            path.push(arg.to_string());
        } else if path.is_empty() {
            return Some(format!("allocsoak has no subcommand `{arg}`"));
        } else {
            positional = true;
        }
    }
    None
}

/// `just --summary`: the Justfile's recipes.
fn recipes() -> BTreeSet<String> {
    let out = Command::new("just")
        .arg("--summary")
        .current_dir(root())
        .output()
        .expect("just runs (`just setup` installs it)");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces as dashes, other
/// punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(page)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// What is wrong with the relative links of `page`.
fn check_links(page: &Path, text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for part in text.split("](").skip(1) {
        let Some(link) = part.split([')', ' ']).next() else {
            continue;
        };
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
        let target = match file {
            "" => page.to_path_buf(),
            f => page.parent().unwrap().join(f),
        };
        if !target.exists() {
            wrong.push(format!("{}: `{link}` leads nowhere", page.display()));
        } else if !fragment.is_empty()
            && target.extension().is_some_and(|e| e == "md")
            && !anchors(&target).contains(fragment)
        {
            wrong.push(format!(
                "{}: `{link}`: no heading `#{fragment}` there",
                page.display()
            ));
        }
    }
    wrong
}

/// Every problem in `text` (a page, or the Justfile with `{{allocsoak}}`).
fn check_code(
    what: &Path,
    lines: &[String],
    recipes: &BTreeSet<String>,
    cache: &mut BTreeMap<Vec<String>, Help>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for line in lines {
        let line = line
            .replace("cargo run -q --release -p soak --", "allocsoak")
            .replace("cargo run --release -p soak --", "allocsoak")
            .replace("{{allocsoak}}", "allocsoak");
        for args in commands_of(&line, "allocsoak") {
            // What allocsoak prints (`allocsoak violation: ...`), not a command.
            if args.first().is_some_and(|a| a.ends_with(':')) {
                continue;
            }
            if let Some(why) = check_command(&args, cache) {
                wrong.push(format!("{}: `{}`: {why}", what.display(), line.trim()));
            }
        }
        for args in commands_of(&line, "just") {
            match args.first() {
                Some(r) if !r.starts_with('-') && !recipes.contains(*r) => wrong.push(format!(
                    "{}: `{}`: no just recipe `{r}`",
                    what.display(),
                    line.trim()
                )),
                _ => {}
            }
        }
    }
    wrong
}

#[test]
fn the_manual_names_only_links_commands_flags_and_recipes_that_exist() {
    let recipes = recipes();
    let mut cache = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut commands = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        wrong.extend(check_links(&page, &text));
        let code = code(&text);
        commands += code
            .iter()
            .map(|l| commands_of(l, "allocsoak").len())
            .sum::<usize>();
        wrong.extend(check_code(&page, &code, &recipes, &mut cache));
    }
    let justfile = root().join("Justfile");
    // The recipes' bodies, not the comments.
    let recipes_text: Vec<String> = std::fs::read_to_string(&justfile)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with([' ', '\t']) && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect();
    wrong.extend(check_code(&justfile, &recipes_text, &recipes, &mut cache));
    assert!(commands > 30, "only {commands} allocsoak commands found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checks themselves: a flag, a subcommand, a recipe or a link that is
/// not there is found.
#[test]
fn a_missing_flag_subcommand_recipe_or_link_is_named() {
    let mut cache = BTreeMap::new();
    let ok = |args: &str, cache: &mut _| {
        check_command(&args.split_whitespace().collect::<Vec<_>>(), cache)
    };
    assert_eq!(ok("coverage --state s --allocator mine", &mut cache), None);
    assert_eq!(
        ok("--config a.toml triage verify --state s", &mut cache),
        None
    );
    assert!(ok("coverage --no-such-flag", &mut cache)
        .unwrap()
        .contains("--no-such-flag"));
    assert!(ok("no-such-command --state s", &mut cache)
        .unwrap()
        .contains("no-such-command"));
    let recipes = recipes();
    let wrong = check_code(
        Path::new("x.md"),
        &["just no-such-recipe".to_string()],
        &recipes,
        &mut cache,
    );
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    let page = root().join("docs/coverage.md");
    assert_eq!(
        check_links(
            &page,
            "[a](no-such.md) [b](soak.md#no-such-heading) [c](soak.md)"
        )
        .len(),
        2
    );
}

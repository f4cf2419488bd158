//! The HTML pages, from the templates in `dashboards/templates`
//! (minijinja, every value escaped unless marked safe here).

use anyhow::{Context, Result};
use minijinja::value::Serde;
use minijinja::{context, Environment, Value};
use pulldown_cmark::{Event, Options, Parser};

use super::data::{self, DriftSeries, GroupLine};
use crate::running::status::Overview;

/// Where links point: the live server's paths, or an export's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    Serve,
    /// An export; `depth` folders below its top (a group page is 1).
    Export {
        depth: usize,
    },
}

impl Links {
    fn root(self) -> String {
        match self {
            Links::Serve => "/".into(),
            Links::Export { depth } => "../".repeat(depth),
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Links::Serve => "",
            Links::Export { .. } => ".html",
        }
    }

    fn home(self) -> String {
        match self {
            Links::Serve => "/".into(),
            Links::Export { .. } => format!("{}index.html", self.root()),
        }
    }

    /// The values every page's links are built from.
    fn context(self) -> Value {
        context! {
            root => self.root(),
            ext => self.ext(),
            home => self.home(),
            live => self == Links::Serve,
        }
    }
}

pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in [
        (
            "base.html",
            include_str!("../../../dashboards/templates/base.html"),
        ),
        (
            "overview.html",
            include_str!("../../../dashboards/templates/overview.html"),
        ),
        (
            "groups.html",
            include_str!("../../../dashboards/templates/groups.html"),
        ),
        (
            "group.html",
            include_str!("../../../dashboards/templates/group.html"),
        ),
    ] {
        env.add_template(name, source)
            .expect("the dashboard's templates parse");
    }
    env
}

/// What the overview page shows: the soak's state, the range its charts
/// cover, the newest groups, the drift series and the source coverage.
pub struct Home<'a> {
    pub o: &'a Overview,
    pub range: &'a str,
    pub recent: &'a [GroupLine],
    pub drift: &'a [DriftSeries],
    pub coverage: &'a data::SourceCoverage,
}

pub fn overview(env: &Environment, links: Links, home: &Home) -> Result<String> {
    let Home {
        o,
        range,
        recent,
        drift,
        coverage,
    } = *home;
    let totals = context! {
        execs_per_sec => o.slots.iter().map(|s| s.execs_per_sec).sum::<f64>().round(),
        corpus => o.slots.iter().map(|s| s.corpus).sum::<i64>(),
        slots => o.slots.len(),
        fuzzing => o.slots.iter().filter(|s| s.fuzzing).count(),
    };
    let ranges: Vec<&str> = data::RANGES.iter().map(|r| r.0).collect();
    render(
        env,
        "overview.html",
        context! {
            links => links.context(),
            o => Value::from(Serde(o)),
            totals => totals,
            range => range,
            ranges => ranges,
            recent => Value::from(Serde(recent)),
            drift => Value::from(Serde(drift.iter().map(|d| &d.row).collect::<Vec<_>>())),
            coverage => Value::from(Serde(&coverage.rows)),
            coverage_make => &coverage.make,
        },
    )
}

pub fn groups(
    env: &Environment,
    links: Links,
    groups: &[GroupLine],
    filter: &crate::pipeline::groups::Filter,
    choices: &Choices,
) -> Result<String> {
    render(
        env,
        "groups.html",
        context! {
            links => links.context(),
            groups => Value::from(Serde(groups)),
            filter => context! {
                allocator => filter.allocator.clone(),
                target => filter.target.clone(),
                kind => filter.kind.clone(),
                status => filter.status.clone(),
            },
            choices => Value::from(Serde(choices)),
        },
    )
}

/// The values the groups page's filters offer.
#[derive(serde::Serialize)]
pub struct Choices {
    pub allocators: Vec<String>,
    pub targets: Vec<String>,
    pub kinds: Vec<String>,
    pub statuses: Vec<String>,
}

impl Choices {
    pub fn of(groups: &[GroupLine]) -> Choices {
        let sorted = |f: &dyn Fn(&GroupLine) -> &String| {
            let mut v: Vec<String> = groups.iter().map(|g| f(g).clone()).collect();
            v.sort();
            v.dedup();
            v
        };
        Choices {
            allocators: sorted(&|g| &g.allocator),
            targets: sorted(&|g| &g.target),
            kinds: sorted(&|g| &g.kind),
            statuses: sorted(&|g| &g.status),
        }
    }
}

/// A group's page: its REPORT.md rendered, and its files to download
/// (paths under the state dir).
pub fn group(
    env: &Environment,
    links: Links,
    g: &GroupLine,
    report: &str,
    files: &[String],
) -> Result<String> {
    render(
        env,
        "group.html",
        context! {
            links => links.context(),
            g => Value::from(Serde(g)),
            report => Value::from_safe_string(markdown(report)),
            files => Value::from(Serde(files)),
        },
    )
}

fn render(env: &Environment, name: &str, ctx: Value) -> Result<String> {
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .with_context(|| format!("failed to render {name}"))
}

/// Markdown to HTML with any HTML in the text shown as text: a crash
/// message or a stack may hold `<script>`.
pub fn markdown(text: &str) -> String {
    let events = Parser::new_ext(text, Options::ENABLE_TABLES).map(|e| match e {
        Event::Html(t) | Event::InlineHtml(t) => Event::Text(t),
        e => e,
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_in_a_report_is_text() {
        let html = markdown(
            "# t\n\n<script>alert(1)</script>\n\nx <b onmouseover=x>y</b>\n\n```\n<script>\n```\n",
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<b "), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }
}

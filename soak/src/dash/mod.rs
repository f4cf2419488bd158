//! `allocsoak dash`: the soak's dashboard, read-only over a state dir.
//!
//! Pages come from the templates in `dashboards/templates`, the charts are
//! drawn in the browser by uPlot (vendored in `dashboards/static`) from
//! JSON the page polls, `/metrics` speaks Prometheus, and `--export`
//! writes the same pages as files. Data flows one way: store →
//! [`data`] → pages, JSON, metrics. Every request opens the store to read
//! only, so the dashboard never writes and never holds up the soak.

mod data;
mod files;
mod metrics;
mod pages;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};
use minijinja::Environment;

use crate::foundation::state::{self, StateDir};
use crate::foundation::store::Store;
use crate::pipeline::groups::Filter;
use pages::Links;

/// One answer.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            content_type,
            body: body.into(),
        }
    }

    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n").into_bytes(),
        }
    }
}

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";

/// The static files, built in: the binary serves them from anywhere.
const STATIC: [(&str, &str, &str); 4] = [
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../../dashboards/static/style.css"),
    ),
    (
        "dash.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../dashboards/static/dash.js"),
    ),
    (
        "vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../dashboards/static/vendor/uPlot.iife.min.js"),
    ),
    (
        "vendor/uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("../../../dashboards/static/vendor/uPlot.min.css"),
    ),
];

/// A state dir, its `[drift]` rules and the templates.
pub struct Site {
    state: StateDir,
    drift: drift::TrendConfig,
    env: Environment<'static>,
}

impl Site {
    pub fn open(state: &Path, drift: drift::TrendConfig) -> Result<Site> {
        let state = StateDir::open_to_read(state)?;
        Store::open_read_only(&state.store())?;
        Ok(Site {
            state,
            drift,
            env: pages::environment(),
        })
    }

    fn store(&self) -> Result<Store> {
        Store::open_read_only(&self.state.store())
    }

    /// The answer to a GET of `url` (a path and maybe a query).
    pub fn get(&self, url: &str) -> Response {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        match self.route(path, query) {
            Ok(Some(r)) => r,
            Ok(None) => Response::text(404, "not found"),
            Err(e) => Response::text(500, &format!("{e:#}")),
        }
    }

    fn route(&self, path: &str, query: &str) -> Result<Option<Response>> {
        let param = |name: &str| query_param(query, name);
        Ok(Some(match path {
            "/" | "/index.html" => Response::ok(
                HTML,
                self.overview_page(Links::Serve, param("range").as_deref())?,
            ),
            "/groups" => {
                let filter = Filter {
                    allocator: param("allocator"),
                    target: param("target"),
                    kind: param("kind"),
                    status: param("status"),
                };
                Response::ok(HTML, self.groups_page(Links::Serve, &filter)?)
            }
            "/metrics" => {
                let store = self.store()?;
                let o = data::overview(&self.state, &store, &self.drift)?;
                let drift = data::drift(&store, &self.drift)?;
                Response::ok(
                    "text/plain; version=0.0.4; charset=utf-8",
                    metrics::render(&store, &o, &drift)?,
                )
            }
            "/api/overview.json" => {
                let store = self.store()?;
                let o = data::overview(&self.state, &store, &self.drift)?;
                Response::ok(JSON, serde_json::to_vec(&o)?)
            }
            "/api/timeline.json" => {
                let timeline = data::timeline(&self.store()?, param("range").as_deref())?;
                Response::ok(JSON, serde_json::to_vec(&timeline)?)
            }
            "/api/coverage.json" => Response::ok(
                JSON,
                serde_json::to_vec(&data::source_coverage(&self.state)?)?,
            ),
            "/api/drift.json" => {
                let drift = data::drift(&self.store()?, &self.drift)?;
                Response::ok(JSON, serde_json::to_vec(&drift)?)
            }
            _ => {
                if let Some(id) = path.strip_prefix("/groups/") {
                    return self
                        .group_page(Links::Serve, id)
                        .map(|p| p.map(|p| Response::ok(HTML, p)));
                }
                if let Some(rel) = path.strip_prefix("/files/") {
                    let Some(file) = files::resolve(self.state.root(), rel) else {
                        return Ok(None);
                    };
                    let body = std::fs::read(&file)?;
                    return Ok(Some(Response::ok(files::content_type(&file), body)));
                }
                if let Some(name) = path.strip_prefix("/static/") {
                    return Ok(STATIC
                        .iter()
                        .find(|s| s.0 == name)
                        .map(|s| Response::ok(s.1, s.2)));
                }
                return Ok(None);
            }
        }))
    }

    fn overview_page(&self, links: Links, range: Option<&str>) -> Result<String> {
        let store = self.store()?;
        let o = data::overview(&self.state, &store, &self.drift)?;
        let mut recent = data::groups(&self.state, &store, &Filter::default())?;
        recent.truncate(10);
        let drift = data::drift(&store, &self.drift)?;
        let coverage = data::source_coverage(&self.state)?;
        let home = pages::Home {
            o: &o,
            range: data::range(range).0,
            recent: &recent,
            drift: &drift,
            coverage: &coverage,
        };
        pages::overview(&self.env, links, &home)
    }

    fn groups_page(&self, links: Links, filter: &Filter) -> Result<String> {
        let store = self.store()?;
        let all = data::groups(&self.state, &store, &Filter::default())?;
        let shown = data::groups(&self.state, &store, filter)?;
        pages::groups(&self.env, links, &shown, filter, &pages::Choices::of(&all))
    }

    /// The page of the group with exactly this id, if there is one.
    fn group_page(&self, links: Links, id: &str) -> Result<Option<String>> {
        let store = self.store()?;
        let Some(g) = data::groups(&self.state, &store, &Filter::default())?
            .into_iter()
            .find(|g| g.id == id)
        else {
            return Ok(None);
        };
        let dir = self.state.crash_group(&g.id);
        let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap_or_default();
        let mut files = Vec::new();
        for sub in ["", "inputs", "culprits", "history"] {
            let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect();
            names.sort();
            for name in names {
                let rel = Path::new("crashes").join(&g.id).join(sub).join(name);
                files.push(rel.to_string_lossy().into_owned());
            }
        }
        pages::group(&self.env, links, &g, &report, &files).map(Some)
    }

    /// Writes the pages as files under `out`: `index.html`, `groups.html`,
    /// `groups/<id>.html`, the static files, `data.js` (what the charts
    /// draw, as the live page would fetch it) and the groups' files. It
    /// opens from `file://`.
    pub fn export(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out.join("groups"))
            .with_context(|| format!("failed to create {}", out.join("groups").display()))?;
        let top = Links::Export { depth: 0 };
        let store = self.store()?;
        state::write_atomic(
            &out.join("index.html"),
            self.overview_page(top, Some("all"))?.as_bytes(),
        )?;
        state::write_atomic(
            &out.join("groups.html"),
            self.groups_page(top, &Filter::default())?.as_bytes(),
        )?;
        let groups = data::groups(&self.state, &store, &Filter::default())?;
        for g in &groups {
            if let Some(page) = self.group_page(Links::Export { depth: 1 }, &g.id)? {
                state::write_atomic(
                    &out.join("groups").join(format!("{}.html", g.id)),
                    page.as_bytes(),
                )?;
            }
            let from = self.state.crash_group(&g.id);
            copy_files(&from, &out.join("files/crashes").join(&g.id))?;
        }
        copy_tree(
            &self.state.coverage().join("html"),
            &out.join("files/coverage/html"),
        )?;
        for (name, _, body) in STATIC {
            let path = out.join("static").join(name);
            std::fs::create_dir_all(path.parent().expect("static files are in static/"))?;
            state::write_atomic(&path, body.as_bytes())?;
        }
        let data = serde_json::json!({
            "overview": data::overview(&self.state, &store, &self.drift)?,
            "timeline": data::timeline(&store, Some("all"))?,
            "drift": data::drift(&store, &self.drift)?,
            "coverage": data::source_coverage(&self.state)?,
        });
        state::write_atomic(
            &out.join("static/data.js"),
            format!("window.ALLOCSOAK = {data};\n").as_bytes(),
        )?;
        Ok(())
    }
}

/// The regular files of a group's folder and its input folders, copied.
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    for sub in ["", "inputs", "culprits", "history"] {
        let Ok(entries) = std::fs::read_dir(from.join(sub)) else {
            continue;
        };
        std::fs::create_dir_all(to.join(sub))?;
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                state::copy_atomic(&e.path(), &to.join(sub).join(e.file_name()))?;
            }
        }
    }
    Ok(())
}

/// Copies every file under `from` (none if it is not there) to `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    std::fs::create_dir_all(to)?;
    for e in entries.flatten() {
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        } else if kind.is_file() {
            state::copy_atomic(&e.path(), &to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// The first value of `name` in a query string, percent-decoded; an empty
/// value is none.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        if k != name || v.is_empty() {
            return None;
        }
        let v = v.replace('+', " ");
        percent_encoding::percent_decode_str(&v)
            .decode_utf8()
            .ok()
            .map(|v| v.into_owned())
    })
}

/// Serves `site` on `addr` until the process is stopped: GET and HEAD
/// only (anything else is 405; tiny_http leaves a HEAD's body out), one
/// request at a time.
pub fn serve(site: &Site, addr: SocketAddr) -> Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("failed to listen on {addr}: {e}; pick another --port"))?;
    println!(
        "dash: serving {} on http://{addr}/",
        site.state.root().display()
    );
    for request in server.incoming_requests() {
        let r = match request.method() {
            tiny_http::Method::Get | tiny_http::Method::Head => site.get(request.url()),
            _ => Response::text(
                405,
                "method not allowed: the dashboard is read-only (GET, HEAD)",
            ),
        };
        let header = |k: &str, v: &str| {
            tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("a valid header")
        };
        let mut response = tiny_http::Response::from_data(r.body)
            .with_status_code(r.status)
            .with_header(header("Content-Type", r.content_type))
            .with_header(header("X-Content-Type-Options", "nosniff"))
            .with_header(header(
                "Content-Security-Policy",
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
            ))
            .with_header(header("Cache-Control", "no-store"));
        if r.status == 405 {
            response = response.with_header(header("Allow", "GET, HEAD"));
        }
        let _ = request.respond(response);
    }
    Ok(())
}

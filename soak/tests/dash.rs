//! The dashboard end to end: a real short soak of a planted zoo bug, the
//! real `allocsoak dash` over its state dir, and Debian's `chromium`,
//! headless, reading the pages as a person would.

mod common;

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{allocsoak, ONE_AT_A_TIME};

/// A `<script>` a crash text could hold; it must show as text.
const SCRIPT: &str = "<script>document.title='owned'</script>";

#[test]
fn the_dashboard_shows_a_live_soak_and_its_groups_safely() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut soak = Killed(
        allocsoak()
            .args([
                "soak",
                "--duration",
                "600",
                "--jobs",
                "1",
                "--drift-share",
                "0",
            ])
            .args(["--target", "alloc_ops", "--allocator", "zoo:double-issue"])
            .arg("--state")
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let report = wait_for_report(&state, &mut soak.0);

    let port = free_port();
    let _dash = Killed(
        allocsoak()
            .args(["dash", "--port", &port.to_string(), "--state"])
            .arg(&state)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for_port(port);

    // Live: the elapsed time the server wrote into the page moves on in
    // the browser, without a reload, while the soak runs.
    let (status, page) = http(port, "GET", "/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("running"), "the soak is running: {page}");
    // Without a coverage report, the command that makes one, for this
    // state dir (it once named the soak's state word instead).
    let make = format!("allocsoak coverage --state {}", state.display());
    let shown = page.replace("&#x2f;", "/");
    assert!(shown.contains(&make), "no `{make}` on the overview: {page}");
    let mut browser = Browser::open(&format!("{base}/"));
    let elapsed = "document.querySelector('[data-fact=elapsed]').textContent";
    let first: u64 = browser.wait_for(elapsed, |v| v.parse().ok());
    std::thread::sleep(Duration::from_secs(8));
    let later: u64 = browser.wait_for(elapsed, |v| v.parse().ok());
    assert!(
        later >= first + 5,
        "elapsed {first} then {later}: the page did not update"
    );
    // Every chart place holds a drawn chart.
    let places: usize = browser
        .eval("String(document.querySelectorAll('.chart').length)")
        .parse()
        .unwrap();
    assert!(places >= 7, "{places} charts on the overview");
    browser.wait_for(
        "String(document.querySelectorAll('.chart .uplot').length)",
        |v| v.parse::<usize>().ok().filter(|n| *n == places),
    );
    let slot = browser.eval("document.getElementById('slots').textContent");
    assert!(slot.contains("alloc_ops/zoo:double-issue"), "{slot}");
    drop(browser);

    stop(&mut soak.0);
    // A crash text holding markup, in the store and in the report.
    let id = report
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    common::db(&state)
        .execute(
            "UPDATE crash_group SET title = title || ?1 WHERE id = ?2",
            [SCRIPT, &id],
        )
        .unwrap();
    let mut text = std::fs::read_to_string(&report).unwrap();
    text.push_str(&format!("\nallocsoak violation: {SCRIPT}\n"));
    std::fs::write(&report, text).unwrap();

    let (status, page) = http(port, "GET", &format!("/groups/{id}"));
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains(SCRIPT), "markup passed through: {page}");
    assert!(page.contains("&lt;script&gt;"), "{page}");
    let repro: String = common::db(&state)
        .query_row("SELECT repro FROM crash_group WHERE id = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    let mut browser = Browser::open(&format!("{base}/groups/{id}"));
    let shown = browser.wait_for(
        "String(document.getElementById('repro')?.textContent ?? '')",
        |v| (!v.is_empty()).then(|| v.to_string()),
    );
    assert_eq!(shown, repro, "the repro command to copy");
    // Run as the page shows it, it ends at the bug.
    let out = common::repro(&shown);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("overlap"),
        "`{shown}` as the page shows it: {stderr}"
    );
    assert_ne!(browser.eval("document.title"), "owned", "the script ran");
    let text = browser.eval("document.querySelector('.report').textContent");
    assert!(text.contains(SCRIPT), "shown as text: {text}");
    drop(browser);
    let (_, groups) = http(port, "GET", "/groups?kind=overlap");
    assert!(!groups.contains(SCRIPT), "{groups}");

    // Read-only, and nothing outside a group's folder.
    for (method, path, want) in [
        ("POST", "/", 405),
        ("PUT", "/groups", 405),
        ("DELETE", &format!("/groups/{id}") as &str, 405),
        ("GET", "/files/store.sqlite", 404),
        ("GET", "/files/crashes/../store.sqlite", 404),
        ("GET", "/files/crashes/%2e%2e/store.sqlite", 404),
        ("GET", "/files//etc/passwd", 404),
        ("GET", "/static/../../Cargo.toml", 404),
        ("HEAD", "/", 200),
        ("GET", &format!("/files/crashes/{id}/REPORT.md"), 200),
    ] {
        let (status, body) = http(port, method, path);
        assert_eq!(status, want, "{method} {path}: {body}");
    }

    // /metrics parses as Prometheus text and has the slot's numbers.
    let (status, metrics) = http(port, "GET", "/metrics");
    assert_eq!(status, 200);
    let lines = metrics.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let names: Vec<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for want in [
        "allocsoak_execs_per_second",
        "allocsoak_coverage",
        "allocsoak_corpus_inputs",
        "allocsoak_execs_total",
        "allocsoak_crash_groups",
        "allocsoak_peak_rss_bytes",
    ] {
        assert!(names.contains(&want), "{want} missing: {metrics}");
    }
    let overlaps = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "allocsoak_crash_groups")
        .find(|s| s.labels.get("kind") == Some("overlap"));
    assert!(overlaps.is_some(), "no overlap group: {metrics}");

    // The Grafana dashboard reads only metrics that exist.
    let grafana =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/grafana/allocsoak.json");
    let grafana: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(grafana).unwrap()).unwrap();
    let mut read = 0;
    for panel in grafana["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("allocsoak_"))
            {
                read += 1;
                assert!(
                    names.contains(&name) || metrics.contains(&format!("# TYPE {name} ")),
                    "the Grafana panel {} reads {name}, which /metrics lacks",
                    panel["title"]
                );
            }
        }
    }
    assert!(read >= 10, "{read} metrics read");

    // The overview as a picture: not blank.
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("overview.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1100",
            "--virtual-time-budget=5000",
        ],
        &format!("{base}/"),
    );
    assert!(
        colors(&shot) >= 16,
        "the screenshot is blank: {}",
        shot.display()
    );

    // The export opens from disk, charts and all.
    let export = dir.path().join("export");
    let out = allocsoak()
        .args(["dash", "--state"])
        .arg(&state)
        .arg("--export")
        .arg(&export)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let index = format!("file://{}", export.join("index.html").display());
    let dom = chromium(&["--dump-dom", "--virtual-time-budget=3000"], &index);
    assert!(
        dom.contains("class=\"uplot"),
        "charts drawn from file://: {dom}"
    );
    assert!(export.join(format!("groups/{id}.html")).is_file());
    assert!(export
        .join(format!("files/crashes/{id}/REPORT.md"))
        .is_file());
}

/// The group's REPORT.md, once the soak has filed one (it must within
/// two minutes; it takes seconds on an idle machine).
fn wait_for_report(state: &Path, soak: &mut Child) -> PathBuf {
    let start = Instant::now();
    loop {
        let found = std::fs::read_dir(state.join("crashes")).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path().join("REPORT.md"))
                .find(|p| p.is_file())
        });
        if let Some(report) = found {
            return report;
        }
        assert!(
            soak.try_wait().unwrap().is_none(),
            "the soak ended without a group"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no group within two minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Stops the soak as Ctrl-C would; it must end cleanly.
fn stop(soak: &mut Child) {
    // SAFETY: `kill` has no memory preconditions; our own child's pid, not yet waited
    // for (`wait_for_report` only saw it running), so not reused.
    unsafe { libc::kill(soak.id() as i32, libc::SIGINT) };
    let status = soak.wait().unwrap();
    assert!(status.success(), "the soak failed: {status}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "dash did not listen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (status, body) of one request. The body is read by its
/// Content-Length: Chromium's DevTools server keeps the connection open.
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = &stream;
    write!(
        writer,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = None;
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = Vec::new();
    match length {
        Some(n) if method != "HEAD" => {
            body.resize(n, 0);
            reader.read_exact(&mut body).unwrap();
        }
        Some(_) => {}
        None => {
            reader.read_to_end(&mut body).unwrap();
        }
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// What headless Chromium printed for `url`; `chromium` must be installed
/// (`scripts/setup` installs it).
fn chromium(args: &[&str], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium (scripts/setup installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Headless Chromium driven over the DevTools protocol: a page that stays
/// open while the test reads it.
struct Browser {
    _chromium: Killed,
    socket: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn open(url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let port = free_port();
        let chromium = Killed(
            Command::new("chromium")
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                ])
                .arg(format!("--remote-debugging-port={port}"))
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .arg("--window-size=1280,1000")
                .arg(url)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run chromium (scripts/setup installs it)"),
        );
        let start = Instant::now();
        let ws = loop {
            let listed = TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| http(port, "GET", "/json/list").1);
            let page = listed.and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok());
            let ws = page.as_ref().and_then(|p| {
                p.as_array()?.iter().find(|t| t["type"] == "page")?["webSocketDebuggerUrl"]
                    .as_str()
                    .map(String::from)
            });
            if let Some(ws) = ws {
                break ws;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "chromium did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let (socket, _) = tungstenite::connect(ws.as_str()).unwrap();
        Browser {
            _chromium: chromium,
            socket,
            next: 1,
            _profile: profile,
        }
    }

    /// The value of a JavaScript expression in the page, as a string.
    fn eval(&mut self, expression: &str) -> String {
        let id = self.next;
        self.next += 1;
        let call = serde_json::json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": { "expression": expression, "returnByValue": true },
        });
        self.socket
            .send(tungstenite::Message::text(call.to_string()))
            .unwrap();
        loop {
            let message = self.socket.read().unwrap();
            let Ok(text) = message.to_text() else {
                continue;
            };
            let Ok(reply) = serde_json::from_str::<serde_json::Value>(text) else {
                continue;
            };
            if reply["id"] == id {
                let value = &reply["result"]["result"]["value"];
                return value
                    .as_str()
                    .map_or_else(|| value.to_string(), String::from);
            }
        }
    }

    /// Evaluates `expression` until `parse` takes it, for up to 30 s.
    fn wait_for<T>(&mut self, expression: &str, parse: impl Fn(&str) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            let value = self.eval(expression);
            if let Some(t) = parse(&value) {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{expression} is still {value}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Distinct colours in a PNG.
fn colors(path: &Path) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let mut seen: Vec<&[u8]> = buf[..info.buffer_size()].chunks(step).collect();
    seen.sort();
    seen.dedup();
    seen.len()
}

/// A child killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

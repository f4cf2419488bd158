//! Which files under the state dir the dashboard hands out: a crash
//! group's folder and the coverage report's HTML, nothing else, and no
//! path that leaves them.

use std::path::{Component, Path, PathBuf};

/// The folders under the state dir whose files are served.
const SERVED: [&str; 2] = ["crashes", "coverage/html"];

/// The file `rel` (a URL path under `/files/`, still percent-encoded)
/// names under `root`, if it may be served: it lies under one of
/// [`SERVED`], has no `..`, root or prefix parts, and after symlinks are
/// followed is still a regular file under that folder.
pub fn resolve(root: &Path, rel: &str) -> Option<PathBuf> {
    let rel = percent_encoding::percent_decode_str(rel)
        .decode_utf8()
        .ok()?;
    if rel.contains('\0') || rel.contains('\\') {
        return None;
    }
    let path = Path::new(rel.as_ref());
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let served = SERVED.iter().find(|s| path.starts_with(s))?;
    let folder = root.join(served).canonicalize().ok()?;
    let full = root.join(path).canonicalize().ok()?;
    (full.starts_with(&folder) && full.is_file()).then_some(full)
}

/// The content type a served file goes out with: text as text, an SVG
/// as an image, anything else (inputs) as bytes to download.
pub fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("md" | "txt" | "log" | "csv" | "toml") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        // llvm-cov's report: its pages, style and script.
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_under_crashes_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("crashes/abc/inputs")).unwrap();
        std::fs::write(root.join("crashes/abc/REPORT.md"), "report").unwrap();
        std::fs::write(root.join("store.sqlite"), "store").unwrap();
        std::os::unix::fs::symlink(root.join("store.sqlite"), root.join("crashes/abc/link"))
            .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("crashes/abc/passwd")).unwrap();
        std::fs::create_dir_all(root.join("coverage/html/mimalloc")).unwrap();
        std::fs::write(root.join("coverage/html/mimalloc/index.html"), "html").unwrap();
        std::fs::write(root.join("coverage/mimalloc.profdata"), "profile").unwrap();
        assert!(resolve(root, "coverage/html/mimalloc/index.html").is_some());
        assert!(resolve(root, "coverage/mimalloc.profdata").is_none());
        assert!(resolve(root, "coverage/html/../mimalloc.profdata").is_none());
        assert!(resolve(root, "crashes/abc/REPORT.md").is_some());
        assert!(resolve(root, "crashes/abc/REPORT%2Emd").is_some());
        for bad in [
            "store.sqlite",
            "crashes/../store.sqlite",
            "crashes/abc/..%2F..%2Fstore.sqlite",
            "crashes/abc/%2E%2E/%2E%2E/store.sqlite",
            "/etc/passwd",
            "crashes//etc/passwd",
            "crashes/abc/link",
            "crashes/abc/passwd",
            "crashes/abc",
            "crashes/abc/inputs",
            "crashes/abc/REPORT.md%00",
            "",
        ] {
            assert_eq!(resolve(root, bad), None, "{bad}");
        }
    }
}

//! The fuzz corpus, replayed on stable Rust: every file of `fuzz/corpus/<target>/` (the
//! seeds, and any input a fuzzing run added or found crashing and that was kept) goes
//! through the same function its cargo-fuzz target calls (`fuzz/src/lib.rs`, included
//! here). A crash found once stays a test.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_file_passes_its_target() {
    for (name, check) in harness::TARGETS {
        let dir = corpus(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "no seeds for {name} in {}",
            dir.display()
        );
        for file in &files {
            let data = std::fs::read(file).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{name} fails on {}", file.display());
        }
    }
}

/// Edge cases written by hand, readable here (no fuzzing run has found a crash yet; one
/// found later belongs in the corpus and, with its reason, here).
#[test]
fn edge_inputs() {
    harness::path_route(b"\x00/a/%2e%2E/../%2f/x");
    harness::client_ip(b"\x00\xc3\xa9, 203.0.113.1");
    harness::check_body(br#"{"requests": []}"#);
    // A smuggling pair: `Transfer-Encoding` with a `Content-Length` is never plain.
    harness::h1_head(
        b"POST / HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
    );
}

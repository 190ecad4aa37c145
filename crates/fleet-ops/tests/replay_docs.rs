//! docs/autoscaling.md shows what the HPA decides for a recorded burst; this
//! recomputes it from the recorded CSV, so the page cannot drift from the
//! code (or the code from the page).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn replay_of_the_recorded_burst_matches_the_docs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(env!("CARGO_BIN_EXE_fleet-lag"))
        .args(["replay", "--csv", "docs/data/burst-lag.csv", "--max-replicas", "8", "--extend-s", "700"])
        .current_dir(&root)
        .output()
        .expect("running fleet-lag replay");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("RESULT hpa_replay"), "{table}");
    let docs = std::fs::read_to_string(root.join("docs/autoscaling.md")).unwrap();
    assert!(docs.contains(&format!("```\n{table}```")), "docs/autoscaling.md does not show this replay:\n{table}");
}

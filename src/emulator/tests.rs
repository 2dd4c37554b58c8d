//! End-to-end checks of the server in-process (conformance against the spec's tables lives in
//! `tests/test_emulator_wire.py`).

use super::*;
use serde_json::{json, Value};

async fn started() -> Emulator {
    Emulator::start(EmulatorOptions::default()).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

#[tokio::test]
async fn query_round_trip_and_record() {
    let emu = started().await;
    let url = format!("{}/query", emu.base_url());
    let body = json!({"model": "Encoder::encoder_embeddings_01", "query": "",
        "events": [{"type": "data.numeric_array", "event_data": {"contents": [[1.0, 2.0, 3.0]]}}]});
    let res = client().post(&url).bearer_auth(emu.api_key()).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["server"], "sensorium-emulator");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["response"]["response"].as_array().unwrap().len(), 768);
    assert_eq!(v["response"]["warning_messages"][0], "window of 3 points was zero-padded to 1024");
    let rec = emu.requests();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].org.as_deref(), Some(DEFAULT_ORG));
    assert_eq!(rec[0].status, 200);
    assert!(rec[0].headers.contains(&("authorization".into(), "Bearer <redacted>".into())));
    assert_eq!(serde_json::from_slice::<Value>(rec[0].body.as_ref().unwrap()).unwrap(), body);
    emu.shutdown().await;
}

#[tokio::test]
async fn reset_fault_is_a_connection_error_and_is_recorded() {
    let emu = started().await;
    emu.inject(FaultRule { path: "/models".into(), action: Some(FaultAction::Reset), ..FaultRule::default() });
    let url = format!("{}/models", emu.base_url());
    let err = client().get(&url).bearer_auth(emu.api_key()).send().await.unwrap_err();
    assert!(!err.is_status());
    let ok = client().get(&url).bearer_auth(emu.api_key()).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let statuses: Vec<u16> = emu.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![0, 200]);
    emu.shutdown().await;
}

#[tokio::test]
async fn shutdown_removes_the_data_dir_and_stops_listening() {
    let emu = started().await;
    let dir = emu.inner.shared.files_dir_for_tests();
    assert!(dir.exists());
    let url = format!("{}/models", emu.base_url());
    emu.shutdown().await;
    assert!(!dir.exists());
    assert!(client().get(&url).send().await.is_err());
    emu.shutdown().await; // idempotent
}

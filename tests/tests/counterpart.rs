//! The loopback counterpart the channel tests rely on (`qflow_tests::counterpart`) has
//! teeth: the real webhook adapter's requests pass its checks, and every breach those
//! tests count as zero — a missing or wrong signature, a stale timestamp, headers that
//! disagree with the body, a key delivered again as another request, an older attempt
//! delivered after a newer one — is caught. And its gate holds requests unlogged.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use qflow_channels::{Adapter, Reply as AdapterReply, Request, Secret, Webhook};
use qflow_tests::counterpart::{Counterpart, Reply, TEST_SECRET};
use serde_json::json;

fn request(call: &str, attempt: u32, amount: i64) -> Request {
    Request {
        channel: "payments".to_owned(),
        idempotency_key: format!("{call}/{attempt}"),
        call_id: call.to_owned(),
        instance: call.split('/').next().unwrap().to_owned(),
        node: "charge".to_owned(),
        attempt,
        variables: [("amount".to_owned(), json!(amount))].into_iter().collect(),
    }
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Posts `r` as the adapter would, with `tamper` applied to the headers and body first.
async fn post(
    cp: &Counterpart,
    r: &Request,
    tamper: impl FnOnce(&mut Vec<(String, String)>, &mut Vec<u8>),
) -> u16 {
    let mut body = serde_json::to_vec(r).unwrap();
    let secret = Secret::parse(TEST_SECRET).unwrap();
    let ts = now_s();
    let mut headers = vec![
        ("idempotency-key".to_owned(), r.idempotency_key.clone()),
        ("qflow-call-id".to_owned(), r.call_id.clone()),
        ("webhook-id".to_owned(), r.idempotency_key.clone()),
        ("webhook-timestamp".to_owned(), ts.to_string()),
        (
            "webhook-signature".to_owned(),
            secret.sign(&r.idempotency_key, ts, &body),
        ),
    ];
    tamper(&mut headers, &mut body);
    let mut post = reqwest::Client::new().post(cp.url()).body(body);
    for (k, v) in headers {
        post = post.header(k, v);
    }
    post.send().await.unwrap().status().as_u16()
}

fn set(headers: &mut [(String, String)], name: &str, value: String) {
    headers.iter_mut().find(|(k, _)| k == name).unwrap().1 = value;
}

#[tokio::test]
async fn the_webhook_adapters_requests_pass_and_every_breach_is_caught() {
    let cp = Counterpart::start(
        TEST_SECRET,
        Arc::new(|d, _| async move { Reply::Answer(json!({ "seen": d.nth_of_key })) }.boxed()),
    )
    .await;
    let webhook = Webhook::new(
        &cp.url(),
        Duration::from_secs(2),
        Duration::from_secs(10),
        Some(Secret::parse(TEST_SECRET).unwrap()),
        Arc::new(now_s),
    )
    .unwrap();
    let call = "0190f5c4-0000-7000-8000-000000000001/3";
    let reply = webhook
        .deliver(request(call, 2, 5))
        .await
        .expect("delivered");
    let AdapterReply::Answer(answer) = reply else {
        panic!("{reply:?}");
    };
    assert_eq!(answer.variables.get("seen"), Some(&json!(1)));
    assert!(cp.violations().is_empty(), "{:?}", cp.violations());
    assert_eq!(cp.delivered(), 1);

    let other = Secret::parse("whsec_b3RoZXItc2VjcmV0LW9mLWVub3VnaC1ieXRlcw==").unwrap();
    let fresh = request("0190f5c4-0000-7000-8000-000000000002/1", 1, 5);
    let breaches: Vec<(&str, u16)> = vec![
        (
            "unsigned",
            post(&cp, &fresh, |h, _| {
                h.retain(|(k, _)| k != "webhook-signature")
            })
            .await,
        ),
        (
            "another secret",
            post(&cp, &fresh, |h, b| {
                set(
                    h,
                    "webhook-signature",
                    other.sign(&fresh.idempotency_key, now_s(), b),
                )
            })
            .await,
        ),
        (
            "tampered body",
            post(&cp, &fresh, |_, b| {
                *b = serde_json::to_vec(&request(&fresh.call_id, 1, 500)).unwrap()
            })
            .await,
        ),
        (
            "stale timestamp",
            post(&cp, &fresh, |h, b| {
                let old = now_s() - 3_600;
                set(h, "webhook-timestamp", old.to_string());
                let sig = Secret::parse(TEST_SECRET)
                    .unwrap()
                    .sign(&fresh.idempotency_key, old, b);
                set(h, "webhook-signature", sig);
            })
            .await,
        ),
        (
            "call id header",
            post(&cp, &fresh, |h, _| {
                set(h, "qflow-call-id", "x/1".to_owned())
            })
            .await,
        ),
        (
            "idempotency key header",
            post(&cp, &fresh, |h, _| {
                set(h, "idempotency-key", "x/1/1".to_owned())
            })
            .await,
        ),
        // The first delivery was attempt 2 of `call`: attempt 1 after it is a double
        // submit; attempt 2 again as another request is not a repeated delivery.
        (
            "older attempt",
            post(&cp, &request(call, 1, 5), |_, _| {}).await,
        ),
        (
            "same key, other request",
            post(&cp, &request(call, 2, 6), |_, _| {}).await,
        ),
    ];
    let violations = cp.violations();
    assert_eq!(
        violations.len(),
        breaches.len(),
        "{breaches:?}: {violations:#?}"
    );
    for (what, status) in &breaches {
        assert_eq!(*status, 400, "{what}");
    }
    assert!(
        violations[6].starts_with("double submit"),
        "{violations:#?}"
    );
    assert_eq!(cp.delivered(), 1, "no breach is logged as a delivery");

    // The same request again is a repeated delivery, not a breach.
    assert_eq!(post(&cp, &request(call, 2, 5), |_, _| {}).await, 200);
    assert_eq!(cp.by_key()[&format!("{call}/2")].len(), 2);
    assert_eq!(cp.violations().len(), breaches.len());
}

#[tokio::test]
async fn a_closed_gate_holds_requests_unlogged() {
    let cp = Counterpart::start(
        TEST_SECRET,
        Arc::new(|_, _| async { Reply::Accepted }.boxed()),
    )
    .await;
    cp.close_gate();
    let held = {
        let cp = cp.clone();
        tokio::spawn(async move {
            post(
                &cp,
                &request("0190f5c4-0000-7000-8000-000000000003/1", 1, 1),
                |_, _| {},
            )
            .await
        })
    };
    while cp.gated() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(cp.delivered(), 0);
    cp.open_gate();
    assert_eq!(held.await.unwrap(), 503);
    assert_eq!(cp.delivered(), 0, "a held request never reaches the script");
    let r = request("0190f5c4-0000-7000-8000-000000000003/1", 1, 1);
    assert_eq!(post(&cp, &r, |_, _| {}).await, 202);
    assert_eq!(cp.delivered(), 1);
}

//! A method the user forces with `Client::use_method` must be correct for the server the
//! client is connected to, or be refused: forced past the check, each of these loses
//! appends the library acknowledged (the crash checker shows it), so accepting them
//! silently breaks the promise that an acknowledged update is durable.

use remora::harness::SimPair;
use remora::{PersistError, Shape, Taxonomy, Update};
use remora_model::config::{ServerConfig, Transport};
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_remotelog::check::{check, CheckOptions, Ring, Target};
use remora_verbs::FlushMethod;

/// (what is wrong, server, update, method).
fn unsuitable() -> Vec<(&'static str, ServerConfig, Update, &'static str)> {
    let c = |s: &str| s.parse::<ServerConfig>().unwrap();
    let mut iwarp = c("WSP+DDIO+PM-RQWRB");
    iwarp.transport = Transport::IWarp;
    vec![
        (
            "a FLUSH leaves the LLC volatile under DMP with DDIO on",
            c("DMP+DDIO+DRAM-RQWRB"),
            Update::Singleton,
            "write-flush",
        ),
        (
            "a SEND into a DRAM receive buffer is volatile, FLUSHed or not",
            c("MHP+DDIO+DRAM-RQWRB"),
            Update::Singleton,
            "send-flush",
        ),
        (
            "a completion on iWARP comes before the data reaches the server",
            iwarp,
            Update::Singleton,
            "send-comp",
        ),
        (
            "b may persist before a under DMP without DDIO",
            c("DMP+noDDIO+DRAM-RQWRB"),
            Update::Compound,
            "write2-flush",
        ),
    ]
}

#[test]
fn an_unsuitable_forced_method_is_refused() {
    let t = Taxonomy::shipped();
    for (why, config, update, name) in unsuitable() {
        let pair = SimPair::new(
            1,
            LatencyProfile::default_profile(),
            config,
            Default::default(),
        );
        let (mut client, _) = pair.open().unwrap();
        let method = t.method(name).unwrap().clone();
        let (refused, kept) = pair
            .sim
            .block_on(Instant::NEVER, async move {
                client
                    .connect(method.primitive(), Shape::default())
                    .await
                    .unwrap();
                let before = client.method(update).unwrap().name.clone();
                let r = client.use_method(update, method);
                (r, client.method(update).unwrap().name == before)
            })
            .unwrap();
        assert!(
            matches!(&refused, Err(PersistError::Unsuitable { method, .. }) if method == name),
            "{name} on {} ({why}) was accepted: {refused:?}",
            config.name()
        );
        assert!(kept, "{name}: the refused method replaced the correct one");
    }
}

#[test]
fn forced_past_the_check_they_lose_acknowledged_appends() {
    let t = Taxonomy::shipped();
    let opts = CheckOptions {
        crash_points: 1000,
        ..CheckOptions::default()
    };
    for (why, config, update, name) in unsuitable() {
        let m = t.method(name).unwrap().clone();
        let target = Target {
            name: format!("{name} on {} ({why})", config.name()),
            config,
            update,
            primitive: m.primitive(),
            method: m,
            flush: FlushMethod::Native,
            wrong: true,
            ring: Ring::Fresh,
        };
        let r = check(&target, &opts).unwrap();
        assert!(r.violations > 0, "{}: nothing lost", target.name);
    }
}

#[test]
fn a_correct_forced_method_is_accepted() {
    // Stronger than needed is correct: DMP-without-DDIO's methods under MHP and WSP, MHP's
    // under WSP, and the message-passing idiom anywhere.
    let t = Taxonomy::shipped();
    let c = |s: &str| s.parse::<ServerConfig>().unwrap();
    for (config, update, name) in [
        (c("WSP+DDIO+PM-RQWRB"), Update::Singleton, "write-flush"),
        (
            c("MHP+DDIO+DRAM-RQWRB"),
            Update::Compound,
            "write-flush-atomic-flush",
        ),
        (c("WSP+noDDIO+DRAM-RQWRB"), Update::Compound, "write-msg-2"),
        (c("DMP+noDDIO+PM-RQWRB"), Update::Singleton, "send-copy"),
    ] {
        let m = t.method(name).unwrap();
        assert_eq!(
            t.check_method(&config, update, m),
            Ok(()),
            "{name} on {}",
            config.name()
        );
    }
}

//! `docs/configuration.md` is the page the typed config generates, and what it says a
//! field accepts is what validation accepts.

use infergate_core::config::InfergateConfig;
use infergate_core::config::reference::{self, MINIMAL_GLOBAL, MINIMAL_INFERGATE, Section};
use infergate_core::global::GlobalRouterConfig;
use serde_json::{Value, json};

fn committed_page() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(reference::PAGE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make config-reference`", path.display()))
}

#[test]
fn the_committed_reference_is_the_generated_one() {
    let generated = reference::render().unwrap();
    let committed = committed_page();
    if generated == committed {
        return;
    }
    let line = generated.lines().zip(committed.lines()).position(|(g, c)| g != c);
    let line = line.unwrap_or_else(|| generated.lines().count().min(committed.lines().count()));
    panic!(
        "{} is out of date: run `make config-reference` and commit the result.\n\
         First difference at line {}:\n  generated: {:?}\n  committed: {:?}",
        reference::PAGE,
        line + 1,
        generated.lines().nth(line).unwrap_or("<end of file>"),
        committed.lines().nth(line).unwrap_or("<end of file>"),
    );
}

#[test]
fn every_link_from_the_crd_reaches_a_field_of_the_reference() {
    let schema = reference::schema_of::<InfergateConfig>().unwrap().to_string();
    let page = reference::render().unwrap();
    let prefix = format!("{}#", reference::PAGE_URL);
    let links: Vec<&str> =
        schema.split(&prefix).skip(1).map(|rest| rest.split(['"', ' ', '\\']).next().unwrap()).collect();
    assert!(links.len() > 10, "the CRD's long descriptions link to the reference: {links:?}");
    for anchor in links {
        assert!(page.contains(&format!("<a id=\"{anchor}\"></a>")), "the CRD links to #{anchor}, which the page lacks");
    }
}

/// Every numeric field, set in a valid file to the edges of what the reference says it
/// accepts: accepted inside, refused at that very field outside. A field the
/// reference gives no rule accepts 0 and large values.
#[test]
fn the_allowed_values_are_those_validation_accepts() {
    let (infergate, global) = reference::files().unwrap();
    let mut base = yaml(MINIMAL_INFERGATE);
    let weights =
        json!({"kv_cache": 1, "queue_depth": 1, "running_requests": 1, "lora_affinity": 1, "prefix_cache": 1});
    base["routing"] = json!({"weights": weights});
    base["pools"][0]["weights"] = weights;
    let checked = probe_all(&infergate, &base, |v| {
        let config: InfergateConfig = serde_json::from_value(v).map_err(|e| format!("parse: {e}"))?;
        config.validate().map_err(|e| e.path)
    });
    assert!(checked >= 30, "only {checked} numeric fields probed");

    let mut base = yaml(MINIMAL_GLOBAL);
    base["rate_limits"] = json!({
        "service": "127.0.0.1:8091", "usage": "127.0.0.1:8092",
        "default": {"requests_per_minute": 1, "tokens_per_minute": 1},
        "models": [{"model": "m", "requests_per_minute": 1, "tokens_per_minute": 1}],
    });
    let checked = probe_all(&global, &base, |v| {
        let config: GlobalRouterConfig = serde_json::from_value(v).map_err(|e| format!("parse: {e}"))?;
        config.validate().map_err(|e| e.path)
    });
    assert!(checked >= 10, "only {checked} numeric fields probed");
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap()
}

fn probe_all(section: &Section, base: &Value, validate: impl Fn(Value) -> Result<(), String> + Copy) -> usize {
    validate(base.clone()).unwrap();
    let mut checked = 0;
    for field in &section.fields {
        let integer = field.type_name == "integer";
        if !integer && field.type_name != "number" {
            continue;
        }
        let path = field.path().replace("[]", "[0]");
        let (accepted, refused) = cases(field.allowed.as_deref(), integer);
        for value in accepted {
            let result = validate(with(base, &path, value.clone()));
            assert_eq!(result, Ok(()), "{path}: {value} is allowed ({:?}) but refused", field.allowed);
        }
        for value in refused {
            let result = validate(with(base, &path, value.clone()));
            assert_eq!(result, Err(path.clone()), "{path}: {value} is not allowed ({:?})", field.allowed);
        }
        checked += 1;
    }
    checked + section.sections.iter().map(|s| probe_all(s, base, validate)).sum::<usize>()
}

/// Values inside and outside a rule, as `config::limits::Rule` prints it.
fn cases(allowed: Option<&str>, integer: bool) -> (Vec<Value>, Vec<Value>) {
    let number = |x: f64| if integer { json!(x as u64) } else { json!(x) };
    let Some(rule) = allowed else {
        return (vec![number(0.0), number(1_000_000.0)], vec![]);
    };
    if let Some(range) = rule.strip_prefix("between ") {
        let (low, high) = range.split_once(" and ").unwrap();
        let (low, high): (u64, u64) = (low.parse().unwrap(), high.parse().unwrap());
        let below = if low > 0 { vec![json!(low - 1)] } else { vec![] };
        return (vec![json!(low), json!(high)], [below, vec![json!(high + 1)]].concat());
    }
    if let Some(low) = rule.strip_prefix("at least ") {
        let low: u64 = low.parse().unwrap();
        return (vec![json!(low), json!(low * 1000)], if low > 0 { vec![json!(low - 1)] } else { vec![] });
    }
    if let Ok(exact) = rule.parse::<u64>() {
        return (vec![json!(exact)], vec![json!(exact + 1)]);
    }
    match rule {
        "a finite number > 0" if integer => (vec![json!(1)], vec![json!(0)]),
        "a finite number > 0" => (vec![json!(1e-6), json!(1e9)], vec![json!(0.0), json!(-1.0)]),
        "a finite number >= 0" => (vec![number(0.0), number(1e9)], if integer { vec![] } else { vec![json!(-0.5)] }),
        "in (0, 1]" => (vec![json!(1e-6), json!(1.0)], vec![json!(0.0), json!(1.5)]),
        // A rule in words is checked by the tests of the code that enforces it.
        _ => (vec![], vec![]),
    }
}

/// `base` with the field at `path` (`a.b[0].c`) set, creating missing objects.
fn with(base: &Value, path: &str, value: Value) -> Value {
    let mut out = base.clone();
    let mut at = &mut out;
    for part in path.split('.') {
        let (key, index) = match part.split_once('[') {
            Some((key, rest)) => (key, Some(rest.trim_end_matches(']').parse::<usize>().unwrap())),
            None => (part, None),
        };
        if at.get(key).is_none_or(Value::is_null) {
            at[key] = json!({});
        }
        at = &mut at[key];
        if let Some(index) = index {
            at = &mut at[index];
        }
    }
    *at = value;
    out
}

//! The Agents endpoint index, mounted under both `/v0.5/agents` and `/agents`.
//!
//! Choices where the spec shows only placeholders: 403 is `forbidden`, 409 `conflict`, 404
//! `not_found` (with the spec's messages 'Agent not found.' and 'Bundle not found.'); deletes
//! answer 204 with no body; a run whose `file` source is missing answers 404 `file_not_found`;
//! a blueprint with bundles of the organization pinned to it cannot be deleted (409); a run
//! whose `file` sink names one of its own sources answers 409 `file_already_exists` (the
//! spec's code for an upload of a taken name) and is not made; any other file of the sink's
//! name is replaced by the run's output.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use super::catalog::{is_node, node_registry};
use super::store::{layered, now, type_id, AgentRec, BlueprintRec, BundleRec, JsonRec, Store};
use super::table::{transition, Status, Trigger};
use super::work::{objective_metric, search_space, EvalJob, RunJob, TrialJob};
use crate::emulator::api_error::ApiError;
use crate::emulator::auth::{self, KeyInfo, Role};
use crate::emulator::catalogue::Catalogue;
use crate::emulator::paging::{page, page_sorted, page_with, Params};
use crate::emulator::state::Shared;

type Answer = Result<Response, ApiError>;

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/blueprints", post(create_blueprint).get(list_blueprints))
        .route("/blueprints/{reference}", get(get_blueprint).delete(delete_blueprint))
        .route("/blueprints/{reference}/versions", get(blueprint_versions))
        .route("/bundles", post(create_bundle).get(list_bundles))
        .route("/bundles/{id}", get(get_bundle).delete(delete_bundle))
        .route("/bundles/{id}/run", post(run_bundle))
        .route("/instances", get(list_instances))
        .route("/instances/{id}", get(get_instance).delete(delete_instance))
        .route("/instances/{id}/pause", post(pause))
        .route("/instances/{id}/resume", post(resume))
        .route("/instances/{id}/cancel", post(cancel))
        .route("/instances/{id}/events", get(instance_events))
        .route("/instances/{id}/logs", get(instance_logs))
        .route("/instances/{id}/results", get(instance_results))
        .route("/instances/{id}/query", post(query_instance))
        .route("/nodes/registry", get(registry))
        .route("/evals", post(create_eval).get(list_evals))
        .route("/evals/{id}", get(get_eval).delete(delete_eval))
        .route("/evals/{id}/cancel", post(cancel_eval))
        .route("/evals/{id}/examples", get(eval_examples))
        .route("/optimizations", post(create_optimization).get(list_optimizations))
        .route("/optimizations/{id}", get(get_optimization).delete(delete_optimization))
        .route("/optimizations/{id}/cancel", post(cancel_optimization))
        .route("/optimizations/{id}/trials", get(list_trials))
        .route("/optimizations/{id}/trials/{trial_id}/promote", post(promote_trial))
}

fn caller(shared: &Shared, headers: &HeaderMap) -> Result<KeyInfo, ApiError> {
    auth::caller(shared, headers).ok_or_else(ApiError::unauthorized_envelope)
}

fn ok(status: StatusCode, body: Value) -> Answer {
    Ok((status, Json(body)).into_response())
}

fn no_content() -> Answer {
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn not_found(what: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("{what} not found."))
}

fn conflict(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "conflict", message)
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid_request("The body must be a JSON object.")),
        Err(e) => Err(ApiError::invalid_request(format!("The body is not valid JSON: {e}"))),
    }
}

fn text_field(body: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid_request(format!("Field '{name}' must be a string."))),
    }
}

fn object_field(body: &Map<String, Value>, name: &str) -> Result<Value, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(json!({})),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(ApiError::invalid_request(format!("Field '{name}' must be an object."))),
    }
}

fn data_ref(value: &Value, at: &str) -> Result<Value, ApiError> {
    let ok = value.get("type").is_some_and(Value::is_string) && value.get("id").is_some_and(Value::is_string);
    if !ok {
        return Err(ApiError::invalid_request(format!("{at} must be a data ref {{type, id, format?}}.")));
    }
    Ok(value.clone())
}

// ---------------------------------------------------------------------------------------------
// Blueprints

/// The document of a create: `document`, or the one `yaml_document` describes; with both they
/// must describe the same blueprint. Connector and node keys must be in the node registry.
fn document_of(body: &Map<String, Value>) -> Result<(Value, Option<String>), ApiError> {
    let yaml = text_field(body, "yaml_document")?;
    let parsed = match &yaml {
        Some(text) => Some(serde_yaml_ng::from_str::<Value>(text).map_err(|e| {
            ApiError::invalid_request(format!("yaml_document is not valid YAML: {e}"))
        })?),
        None => None,
    };
    let document = match (body.get("document").filter(|d| !d.is_null()), parsed) {
        (None, None) => {
            return Err(ApiError::invalid_request("A blueprint needs document or yaml_document."));
        }
        (Some(doc), Some(from_yaml)) => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("blueprint_id");
                }
                v
            };
            if strip(doc) != strip(&from_yaml) {
                return Err(ApiError::invalid_request("document and yaml_document describe different blueprints."));
            }
            doc.clone()
        }
        (Some(doc), None) => doc.clone(),
        (None, Some(from_yaml)) => from_yaml,
    };
    let Some(map) = document.as_object() else {
        return Err(ApiError::invalid_request("The blueprint document must be an object."));
    };
    if !map.get("graph").and_then(|g| g.get("edges")).is_some_and(Value::is_array) {
        return Err(ApiError::invalid_request("The blueprint document needs graph.edges, a list of {from, to}."));
    }
    for section in ["connectors", "nodes"] {
        for (id, entry) in map.get(section).and_then(Value::as_object).into_iter().flatten() {
            let key = entry.get("key").and_then(Value::as_str).unwrap_or("");
            if !is_node(key) {
                return Err(ApiError::invalid_request(format!(
                    "{section}.{id}.key is {key:?}, which is not in the node registry (GET /agents/nodes/registry)."
                )));
            }
        }
    }
    let mut document = document;
    if let Some(m) = document.as_object_mut() {
        m.remove("blueprint_id");
    }
    Ok((document, yaml))
}

async fn create_blueprint(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    let canonical = match body.get("canonical") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::invalid_request("Field 'canonical' must be a boolean.")),
    };
    match (who.role, canonical) {
        (Role::Member, _) => return Err(forbidden("Registering a blueprint needs the admin role.")),
        (Role::Admin, true) => return Err(forbidden("A canonical blueprint needs the super-admin grant.")),
        _ => {}
    }
    let key = text_field(&body, "blueprint_key")?.filter(|k| !k.trim().is_empty())
        .ok_or_else(|| ApiError::invalid_request("Field 'blueprint_key' is required."))?;
    let (document, yaml) = document_of(&body)?;
    let scope = (!canonical).then(|| who.org.clone());
    let replacement_of = text_field(&body, "replacement_of")?;
    let mut store = shared.agents.store.lock();
    match &replacement_of {
        Some(old_id) => {
            let visible = Store::visible(&who.org);
            let old = store.blueprints.iter().find(|b| b.id == *old_id && visible(&b.org))
                .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("Blueprint {old_id} (replacement_of) not found.")))?;
            if old.org != scope || old.lineage != key {
                return Err(ApiError::invalid_request("replacement_of must be the blueprint holding blueprint_key in the same scope."));
            }
            if !old.active {
                return Err(conflict(format!("Blueprint {old_id} is no longer the active version of {key}.")));
            }
        }
        None => {
            if store.blueprints.iter().any(|b| b.active && b.key == key && b.org == scope) {
                return Err(conflict(format!("A blueprint with key {key:?} already exists; pass replacement_of to make a new version.")));
            }
        }
    }
    if let Some(old_id) = &replacement_of {
        store.archive(old_id);
    }
    let seq = store.next_seq();
    let name = document.get("name").and_then(Value::as_str).unwrap_or(&key).to_string();
    let description = document.get("description").and_then(Value::as_str).unwrap_or("").to_string();
    let rec = BlueprintRec {
        id: type_id("blp"), key: key.clone(), lineage: key, name, description, document, yaml, org: scope,
        active: true, created: std::time::SystemTime::now(), seq,
    };
    let answer = rec.full(false);
    store.blueprints.push(rec);
    ok(StatusCode::CREATED, answer)
}

async fn list_blueprints(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let counts = params.flag("bundles_count")?.unwrap_or(false);
    let store = shared.agents.store.lock();
    let visible = Store::visible(&who.org);
    let mut found: Vec<&BlueprintRec> = store.blueprints.iter()
        .filter(|b| visible(&b.org) && params.get("key").is_none_or(|k| b.key == k)).collect();
    found.sort_by_key(|b| std::cmp::Reverse(b.seq));
    let items = found.into_iter().map(|b| {
        let mut v = b.summary();
        if counts {
            let n = store.bundles.iter().filter(|x| x.blueprint_id == b.id && visible(&x.org)).count();
            v["bundles_count"] = json!(n);
        }
        (b.id.clone(), v)
    }).collect();
    ok(StatusCode::OK, page(items, &params, shared.page_size)?)
}

async fn get_blueprint(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(reference): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let yaml = Params::parse(q.as_deref()).flag("yaml")?.unwrap_or(false);
    let store = shared.agents.store.lock();
    let found = store.blueprint(&who.org, &reference).ok_or_else(|| not_found("Blueprint"))?;
    ok(StatusCode::OK, found.full(yaml))
}

async fn delete_blueprint(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(reference): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    let found = store.blueprint(&who.org, &reference).ok_or_else(|| not_found("Blueprint"))?;
    if found.org.is_none() && who.role != Role::SuperAdmin {
        return Err(forbidden("A canonical blueprint can only be deleted with the super-admin grant."));
    }
    if who.role == Role::Member {
        return Err(forbidden("Deleting a blueprint needs the admin role."));
    }
    let id = found.id.clone();
    if store.bundles.iter().any(|b| b.blueprint_id == id && b.org.as_deref() == Some(who.org.as_str())) {
        return Err(conflict("Bundles are pinned to this blueprint; delete them first."));
    }
    store.blueprints.retain(|b| b.id != id);
    no_content()
}

async fn blueprint_versions(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(reference): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let store = shared.agents.store.lock();
    let found = store.blueprint(&who.org, &reference).ok_or_else(|| not_found("Blueprint"))?;
    let (lineage, scope) = (found.lineage.clone(), found.org.clone());
    let mut versions: Vec<&BlueprintRec> = store.blueprints.iter().filter(|b| b.lineage == lineage && b.org == scope).collect();
    versions.sort_by_key(|b| std::cmp::Reverse(b.seq));
    let items = versions.into_iter().map(|b| (b.id.clone(), b.summary())).collect();
    ok(StatusCode::OK, page(items, &Params::parse(q.as_deref()), shared.page_size)?)
}

// ---------------------------------------------------------------------------------------------
// Bundles

async fn create_bundle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    if body.contains_key("model") {
        return Err(ApiError::invalid_request(
            "Field 'model' was removed in release 1.1.10; give models, a map from slot name to registry tag.",
        ));
    }
    let reference = text_field(&body, "blueprint")?.ok_or_else(|| ApiError::invalid_request("Field 'blueprint' is required."))?;
    let name = text_field(&body, "name")?.filter(|n| !n.trim().is_empty())
        .ok_or_else(|| ApiError::invalid_request("Field 'name' is required."))?;
    let models = object_field(&body, "models")?;
    if models.as_object().is_some_and(|m| m.values().any(|v| !v.is_string())) {
        return Err(ApiError::invalid_request("models must map each slot name to a registry tag (a string)."));
    }
    let mut store = shared.agents.store.lock();
    let blueprint = store.blueprint(&who.org, &reference)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("Blueprint {reference:?} not found.")))?;
    check_model_slots(&models, blueprint, &shared.catalogue_for(&who.org))?;
    let blueprint_id = blueprint.id.clone();
    let seq = store.next_seq();
    let rec = BundleRec {
        id: type_id("bnd"), name, description: text_field(&body, "description")?.unwrap_or_default(), blueprint_id,
        values: object_field(&body, "values")?, models, artifacts: object_field(&body, "artifacts")?,
        org: Some(who.org), created: std::time::SystemTime::now(), seq, last_run: 0,
    };
    let answer = rec.json();
    store.bundles.push(rec);
    ok(StatusCode::CREATED, answer)
}

/// Release 1.1.10: a bundle's `models` are refused at creation when a reference is malformed
/// (a tag not of the form `<family>::<version>`) or unaddressable (a slot the blueprint's
/// `models` does not declare, or a tag the organization's model registry, `GET /models`, does
/// not hold), rather than failing the run later. 400 `invalid_request`, the spec's code for an
/// invalid request.
fn check_model_slots(models: &Value, blueprint: &BlueprintRec, registry: &Catalogue) -> Result<(), ApiError> {
    let declared = blueprint.document.get("models").and_then(Value::as_object);
    for (slot, tag) in models.as_object().into_iter().flatten() {
        let tag = tag.as_str().unwrap_or_default();
        if !declared.is_some_and(|d| d.contains_key(slot)) {
            let names = declared.map(|d| d.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")).unwrap_or_default();
            let has = if names.is_empty() { "declares no model slots".to_string() } else { format!("declares the model slots {names}") };
            return Err(ApiError::invalid_request(format!("models: {slot:?} is not a model slot of blueprint {}, which {has}.", blueprint.key)));
        }
        let (prefix, version) = crate::wire::models::split_model_id(tag);
        if prefix.is_none_or(|p| p.trim().is_empty()) || version.trim().is_empty() || version.contains("::") {
            return Err(ApiError::invalid_request(format!(
                "models: the tag of slot {slot:?} is {tag:?}, which is not a registry tag (<family>::<version>)."
            )));
        }
        if registry.family_of(tag).is_none() {
            return Err(ApiError::invalid_request(format!(
                "models: the tag of slot {slot:?} is {tag:?}, which is not in the organization's model registry."
            ))
            .with_suggestion("GET /models lists the tags that can be used."));
        }
    }
    Ok(())
}

async fn list_bundles(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let sort = params.get("sort").unwrap_or("last_run_at");
    if !["created_at", "last_run_at", "name"].contains(&sort) {
        return Err(ApiError::invalid_request(format!("sort is {sort:?}; it takes created_at, last_run_at or name.")));
    }
    let order = params.get("order").unwrap_or(if sort == "name" { "asc" } else { "desc" });
    if !["asc", "desc"].contains(&order) {
        return Err(ApiError::invalid_request(format!("order is {order:?}; it takes asc or desc.")));
    }
    let needle = params.get("query").map(str::to_lowercase);
    let store = shared.agents.store.lock();
    let visible = Store::visible(&who.org);
    // One key sorts the list and places a cursor whose bundle has left it (deleted, or filtered
    // out): the ids' order is not the list's, so the id alone cannot say where it was.
    let key = |b: &BundleRec| match sort {
        "name" => (b.name.clone(), b.seq, 0),
        "created_at" => (String::new(), b.seq, 0),
        _ => (String::new(), b.last_run, b.seq),
    };
    let mut found: Vec<(String, (String, u64, u64), &BundleRec)> = store.bundles.iter().filter(|b| {
        visible(&b.org)
            && params.get("blueprint_id").is_none_or(|id| b.blueprint_id == id)
            && needle.as_ref().is_none_or(|n| b.name.to_lowercase().contains(n) || b.id.contains(n.as_str()))
    }).map(|b| (b.id.clone(), key(b), b)).collect();
    let descending = order == "desc";
    found.sort_by(|a, b| if descending { b.1.cmp(&a.1) } else { a.1.cmp(&b.1) });
    let key_of = |id: &str| store.bundles.iter().chain(&store.deleted_bundles).find(|b| b.id == id && visible(&b.org)).map(key);
    ok(StatusCode::OK, page_sorted(found, descending, key_of, &params, shared.page_size, BundleRec::json)?)
}

async fn get_bundle(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let latest = Params::parse(q.as_deref()).flag("include_latest_runs")?.unwrap_or(false);
    let lag = *shared.agents.lag.lock();
    let store = shared.agents.store.lock();
    let bundle = store.bundle(&who.org, &id).ok_or_else(|| not_found("Bundle"))?;
    let mut answer = bundle.json();
    if latest {
        let mut runs: Vec<&AgentRec> = store.agents.iter().filter(|a| a.bundle_id == id && a.org == who.org).collect();
        runs.sort_by_key(|a| std::cmp::Reverse(a.seq));
        answer["latest_runs"] = Value::Array(runs.into_iter().take(5).map(|a| a.summary(lag)).collect());
    }
    ok(StatusCode::OK, answer)
}

async fn delete_bundle(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    let bundle = store.bundle(&who.org, &id).ok_or_else(|| not_found("Bundle"))?;
    if bundle.org.is_none() {
        return Err(forbidden("A canonical bundle cannot be deleted."));
    }
    if let Some(i) = store.bundles.iter().position(|b| b.id == id) {
        let gone = store.bundles.remove(i);
        store.deleted_bundles.push(gone);
    }
    no_content()
}

async fn run_bundle(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    let mode = text_field(&body, "mode")?;
    if mode.as_deref().is_some_and(|m| m != "serving") {
        return Err(ApiError::invalid_request("mode takes \"serving\" (or is left out for a batch run)."));
    }
    let connectors = body.get("connectors").cloned().unwrap_or(json!({}));
    let sources = match connectors.get("source") {
        Some(Value::Array(items)) => items.iter().enumerate().map(|(i, r)| data_ref(r, &format!("connectors.source[{i}]"))).collect::<Result<Vec<_>, _>>()?,
        None | Some(Value::Null) if mode.is_some() => Vec::new(),
        _ => return Err(ApiError::invalid_request("connectors.source is required: a list of one or more data refs.")),
    };
    if sources.is_empty() && mode.is_none() {
        return Err(ApiError::invalid_request("connectors.source needs one or more data refs."));
    }
    let sink = match connectors.get("sink") {
        None | Some(Value::Null) => Value::Null,
        Some(r) => data_ref(r, "connectors.sink")?,
    };
    // The spec's error for run is a missing bundle: it is looked for before the inputs, so a
    // deleted bundle reads "Bundle not found." whatever the run was given.
    if shared.agents.store.lock().bundle(&who.org, &id).is_none() {
        return Err(not_found("Bundle"));
    }
    for source in &sources {
        let file = source["id"].as_str().unwrap_or("");
        if source["type"] == json!("file") && !shared.files.exists(&who.org, file) {
            return Err(ApiError::file_not_found(file));
        }
    }
    // The spec is silent on a sink named like an existing file. A sink is where a run's output
    // goes, so an earlier output of that name is replaced (a run repeated with one sink keeps
    // its output current); but a sink naming one of the run's own sources would destroy the
    // data the run reads, so that run is refused up front (409, the spec's code for a name
    // that is taken) and the caller picks another sink.
    if let Some(file) = sink.get("id").and_then(Value::as_str).filter(|_| sink["type"] == json!("file")) {
        if sources.iter().any(|source| source["type"] == json!("file") && source["id"].as_str() == Some(file)) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "file_already_exists",
                format!("The sink '{file}' is one of the run's sources; a run does not write over its own input."),
            )
            .with_suggestion("Give the run another sink name."));
        }
    }
    let lag = *shared.agents.lag.lock();
    let mut store = shared.agents.store.lock();
    let bundle = store.bundle(&who.org, &id).cloned().ok_or_else(|| not_found("Bundle"))?;
    let blueprint = store.blueprints.iter().find(|b| b.id == bundle.blueprint_id).cloned()
        .ok_or_else(|| not_found("Blueprint"))?;
    let values = layered(blueprint.document.get("values").unwrap_or(&Value::Null), &bundle.values);
    let seq = store.next_seq();
    let mut agent = AgentRec::new(&who.org, &bundle, &blueprint, values, json!({"source": sources, "sink": sink}), mode.clone(), seq);
    if mode.is_some() {
        agent.started_at = Some(now());
        agent.log("INFO", "job.started", "Serving agent started.");
    }
    let agent_id = agent.id.clone();
    let answer = agent.json(lag);
    store.agents.push(agent);
    if let Some(b) = store.bundles.iter_mut().find(|b| b.id == id) {
        b.last_run = seq;
    }
    drop(store);
    if mode.is_none() {
        shared.jobs.spawn("agent", Arc::new(RunJob { shared: shared.clone(), id: agent_id }), None);
    }
    ok(StatusCode::ACCEPTED, answer)
}

// ---------------------------------------------------------------------------------------------
// Instances

async fn list_instances(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let status = match params.get("status") {
        Some(s) => Some(Status::parse(s).ok_or_else(|| ApiError::invalid_request(format!("Unknown status {s:?}.")))?),
        None => None,
    };
    let needle = params.get("query").map(str::to_lowercase);
    let lag = *shared.agents.lag.lock();
    let store = shared.agents.store.lock();
    let items: Vec<(String, &AgentRec)> = store.agents.iter().rev().filter(|a| {
        a.org == who.org
            && status.is_none_or(|s| a.shown_status(lag) == s)
            && params.get("bundle_id").is_none_or(|b| a.bundle_id == b)
            && params.get("blueprint_id").is_none_or(|b| a.blueprint_id == b)
            && needle.as_ref().is_none_or(|n| a.name.to_lowercase().contains(n) || a.id.contains(n.as_str()) || a.bundle_id.contains(n.as_str()))
    }).map(|a| (a.id.clone(), a)).collect();
    ok(StatusCode::OK, page_with(items, &params, shared.page_size, |a| a.json(lag))?)
}

fn with_agent<T>(shared: &Shared, org: &str, id: &str, f: impl FnOnce(&mut AgentRec) -> Result<T, ApiError>) -> Result<T, ApiError> {
    let mut store = shared.agents.store.lock();
    let agent = store.agent_mut(org, id).ok_or_else(|| not_found("Agent"))?;
    f(agent)
}

async fn get_instance(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let lag = *shared.agents.lag.lock();
    let record = with_agent(&shared, &who.org, &id, |a| Ok(a.json(lag)))?;
    ok(StatusCode::OK, record)
}

/// Pause, resume and cancel: the move the state table allows, or its 409. The answer (and the
/// reads after it) show the move at once: the status lag (`lag_agent_status`) delays what reads
/// say of a run that ended by itself, never the caller's own move, so a cancel answers
/// `canceled` as the spec says.
async fn move_agent(shared: Arc<Shared>, headers: HeaderMap, id: String, trigger: Trigger) -> Answer {
    let who = caller(&shared, &headers)?;
    let lag = *shared.agents.lag.lock();
    let record = with_agent(&shared, &who.org, &id, |a| {
        let to = transition(a.status, trigger).map_err(conflict)?.unwrap_or(a.status);
        a.status = to;
        let (event, message) = match trigger {
            Trigger::Pause => ("job.paused", "Run paused."),
            Trigger::Resume => ("job.resumed", "Run resumed."),
            _ => ("job.canceled", "Run canceled."),
        };
        a.log("INFO", event, message);
        if to.is_terminal() {
            // No `ended`: the lag counts only from an end the run reached by itself.
            a.completed_at = Some(now());
        }
        Ok(a.json(lag))
    })?;
    ok(StatusCode::OK, record)
}

async fn pause(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    move_agent(shared, headers, id, Trigger::Pause).await
}

async fn resume(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    move_agent(shared, headers, id, Trigger::Resume).await
}

async fn cancel(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    move_agent(shared, headers, id, Trigger::Cancel).await
}

async fn delete_instance(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    with_agent(&shared, &who.org, &id, |a| transition(a.status, Trigger::Delete).map_err(conflict))?;
    shared.agents.store.lock().agents.retain(|a| a.id != id);
    no_content()
}

/// A feed of one agent (logs, events, results) as a page, newest first.
fn feed(shared: &Shared, headers: &HeaderMap, id: &str, q: Option<&str>, pick: impl Fn(&AgentRec) -> Vec<Value>, keep: impl Fn(&Value) -> bool) -> Answer {
    let who = caller(shared, headers)?;
    let rows = with_agent(shared, &who.org, id, |a| Ok(pick(a)))?;
    let items = rows.into_iter().rev().filter(|r| keep(r))
        .map(|r| (r.get("id").and_then(Value::as_str).unwrap_or_default().to_string(), r)).collect();
    ok(StatusCode::OK, page(items, &Params::parse(q), shared.page_size)?)
}

async fn instance_events(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    feed(&shared, &headers, &id, q.as_deref(), |a| a.events.clone(), |_| true)
}

async fn instance_logs(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let params = Params::parse(q.as_deref());
    let level = params.get("level").map(str::to_ascii_uppercase);
    let search = params.get("search").map(str::to_lowercase);
    feed(&shared, &headers, &id, q.as_deref(), |a| a.logs.clone(), |row| {
        let field = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        level.as_ref().is_none_or(|l| field("level").eq_ignore_ascii_case(l))
            && search.as_ref().is_none_or(|s| field("message").to_lowercase().contains(s) || field("event_type").to_lowercase().contains(s))
    })
}

async fn instance_results(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    feed(&shared, &headers, &id, q.as_deref(), |a| a.results.iter().rev().cloned().collect(), |_| true)
}

async fn query_instance(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let started = std::time::Instant::now();
    let request = object(&body)?;
    let (values, serving) = with_agent(&shared, &who.org, &id, |a| Ok((a.values.clone(), a.mode.is_some() && a.status == Status::Running)))?;
    if !serving {
        return Err(conflict("Agent is not a running serving agent; start one with mode \"serving\"."));
    }
    let response = match request.get("event_data").and_then(|d| d.get("contents")).and_then(Value::as_array) {
        Some(channels) => {
            let rows: Vec<Vec<f64>> = channels.iter().map(|c| c.as_array().map(|v| v.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()).collect();
            let points = rows.iter().map(Vec::len).max().unwrap_or(0);
            let table = super::outputs::Table {
                timestamps: (0..points).map(|i| i.to_string()).collect(),
                values: (0..points).map(|i| rows.iter().map(|r| r.get(i).copied().unwrap_or(0.0)).collect()).collect(),
                labels: None,
            };
            let names = super::outputs::states(&values);
            let all = json!({"window_size": points.max(1)});
            let prediction = super::outputs::windows(&table, &all, names.len()).first().map(|w| names[w.best()].clone());
            json!({"predicted_state": prediction, "num_channels": rows.len(), "num_points": points})
        }
        None => json!({"answer": format!("Emulated serving agent {id} received fields: {}.",
                                         request.keys().cloned().collect::<Vec<_>>().join(", "))}),
    };
    ok(StatusCode::OK, json!({"status": "completed", "query_response_time_ms": started.elapsed().as_millis() as u64, "response": response}))
}

/// A cursor list since 1.1.11, paged like the others; a node's `key` is its id.
async fn registry(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    caller(&shared, &headers)?;
    let items = node_registry()
        .into_iter()
        .map(|node| (node.get("key").and_then(Value::as_str).unwrap_or_default().to_string(), node))
        .collect();
    ok(StatusCode::OK, page(items, &Params::parse(q.as_deref()), shared.page_size)?)
}

// ---------------------------------------------------------------------------------------------
// Evaluations and optimizations

fn examples(body: &Map<String, Value>, field: &str, required: bool) -> Result<Option<Value>, ApiError> {
    let Some(list) = body.get(field).filter(|v| !v.is_null()) else {
        return if required { Err(ApiError::invalid_request(format!("Field '{field}' is required."))) } else { Ok(None) };
    };
    let items = list.as_array().filter(|a| !a.is_empty())
        .ok_or_else(|| ApiError::invalid_request(format!("{field} must be a list of one or more examples.")))?;
    for (i, example) in items.iter().enumerate() {
        let inputs = example.get("inputs").and_then(Value::as_array).filter(|a| !a.is_empty())
            .ok_or_else(|| ApiError::invalid_request(format!("{field}[{i}].inputs must list one or more data refs.")))?;
        for (j, r) in inputs.iter().enumerate() {
            data_ref(r, &format!("{field}[{i}].inputs[{j}]"))?;
        }
    }
    Ok(Some(list.clone()))
}

/// The `file` inputs of `examples` must exist, as a run's sources must: refused at create with
/// 404 `file_not_found`, not accepted and failed later for want of labels.
fn check_example_files(shared: &Shared, org: &str, examples: Option<&Value>) -> Result<(), ApiError> {
    let inputs = examples.and_then(Value::as_array).into_iter().flatten()
        .flat_map(|e| e.get("inputs").and_then(Value::as_array).into_iter().flatten());
    for input in inputs {
        let file = input["id"].as_str().unwrap_or("");
        if input["type"] == json!("file") && !shared.files.exists(org, file) {
            return Err(ApiError::file_not_found(file));
        }
    }
    Ok(())
}

/// The blueprint's `blp_` id (the reference may be a key) and its default values.
fn blueprint_values(store: &Store, org: &str, reference: &str) -> Result<(String, Value), ApiError> {
    store.blueprint(org, reference).map(|b| (b.id.clone(), b.document.get("values").cloned().unwrap_or(json!({}))))
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("Blueprint {reference:?} not found.")))
}

async fn create_eval(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    let reference = text_field(&body, "blueprint_id")?.ok_or_else(|| ApiError::invalid_request("Field 'blueprint_id' is required."))?;
    let list = examples(&body, "examples", true)?;
    check_example_files(&shared, &who.org, list.as_ref())?;
    let mut store = shared.agents.store.lock();
    let (blueprint_id, values) = blueprint_values(&store, &who.org, &reference)?;
    let record = json!({
        "id": type_id("evl"), "name": text_field(&body, "name")?.unwrap_or_default(), "blueprint_id": blueprint_id,
        "status": "running", "created_at": now(), "started_at": null, "completed_at": null, "error": null,
        "primary": body.get("primary").cloned().unwrap_or(Value::Null), "targets": body.get("targets").cloned().unwrap_or(Value::Null),
        "emit_predictions": body.get("emit_predictions").cloned().unwrap_or(json!(false)),
        "examples": list, "metrics_report": null,
    });
    let id = record["id"].as_str().unwrap_or_default().to_string();
    store.evals.push(JsonRec { org: who.org, json: record.clone() });
    drop(store);
    shared.jobs.spawn("eval", Arc::new(EvalJob { shared: shared.clone(), id, values }), None);
    ok(StatusCode::CREATED, public(&record))
}

/// A record without the bookkeeping it carries for the executor (`example_results`).
fn public(record: &Value) -> Value {
    let mut v = record.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("example_results");
    }
    v
}

fn list_json(recs: &[JsonRec], org: &str, params: &Params, limit: usize) -> Answer {
    let items = recs.iter().rev().filter(|r| r.org == org).filter(|r| {
        let field = |k: &str| r.json.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        params.get("status").is_none_or(|s| Status::parse(s) == r.status())
            && params.get("blueprint_id").is_none_or(|b| field("blueprint_id") == b)
            && params.get("query").is_none_or(|q| field("name").to_lowercase().contains(&q.to_lowercase()) || r.id().contains(q))
    }).map(|r| (r.id(), public(&r.json))).collect();
    ok(StatusCode::OK, page(items, params, limit)?)
}

fn find_json<'a>(recs: &'a mut [JsonRec], org: &str, id: &str, what: &str) -> Result<&'a mut JsonRec, ApiError> {
    recs.iter_mut().find(|r| r.org == org && r.id() == id).ok_or_else(|| not_found(what))
}

async fn list_evals(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let store = shared.agents.store.lock();
    list_json(&store.evals, &who.org, &Params::parse(q.as_deref()), shared.page_size)
}

async fn get_eval(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    let rec = find_json(&mut store.evals, &who.org, &id, "Eval")?;
    ok(StatusCode::OK, public(&rec.json))
}

/// Cancel of an evaluation or optimization: the agent state table's rule (409 once terminal).
fn cancel_json(rec: &mut JsonRec) -> Answer {
    let from = rec.status().unwrap_or(Status::Running);
    let to = transition(from, Trigger::Cancel).map_err(|_| conflict("It has already ended."))?.unwrap_or(from);
    rec.set("status", json!(to.as_str()));
    rec.set("completed_at", json!(now()));
    ok(StatusCode::OK, public(&rec.json))
}

/// Delete of an evaluation or optimization: only once it has ended (409 otherwise).
fn deletable(rec: &JsonRec) -> Result<(), ApiError> {
    transition(rec.status().unwrap_or(Status::Running), Trigger::Delete).map(|_| ()).map_err(|_| conflict("It is still running; cancel it first."))
}

async fn cancel_eval(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    cancel_json(find_json(&mut store.evals, &who.org, &id, "Eval")?)
}

async fn delete_eval(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    deletable(find_json(&mut store.evals, &who.org, &id, "Eval")?)?;
    store.evals.retain(|e| e.id() != id);
    no_content()
}

async fn eval_examples(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    let rec = find_json(&mut store.evals, &who.org, &id, "Eval")?;
    let rows = match rec.json.get("example_results").and_then(Value::as_array) {
        Some(done) => done.clone(),
        // Not run yet, or never to be: an evaluation canceled before its end leaves them canceled.
        None => {
            let status = if rec.status() == Some(Status::Canceled) { "canceled" } else { "pending" };
            rec.json["examples"].as_array().cloned().unwrap_or_default().into_iter().enumerate()
                .map(|(i, e)| json!({"id": format!("exm_{i:04}"), "index": i, "name": e.get("name"), "inputs": e["inputs"], "status": status})).collect()
        }
    };
    let items = rows.into_iter().map(|r| (r["id"].as_str().unwrap_or_default().to_string(), r)).collect();
    ok(StatusCode::OK, page(items, &Params::parse(q.as_deref()), shared.page_size)?)
}

async fn create_optimization(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    let reference = text_field(&body, "blueprint_id")?.ok_or_else(|| ApiError::invalid_request("Field 'blueprint_id' is required."))?;
    let objective = body.get("objective").filter(|o| !o.is_null()).cloned()
        .ok_or_else(|| ApiError::invalid_request("Field 'objective' is required."))?;
    objective_metric(&objective).map_err(ApiError::invalid_request)?;
    let validation = examples(&body, "validation_examples", true)?;
    let training = examples(&body, "training_examples", false)?;
    let calibration = examples(&body, "calibration_examples", false)?;
    let max_trials = body.get("budget").and_then(|b| b.get("max_trials")).and_then(Value::as_u64).filter(|n| (1..=100).contains(n))
        .ok_or_else(|| ApiError::invalid_request("budget.max_trials must be a whole number from 1 to 100."))?;
    search_space(body.get("search_space").unwrap_or(&Value::Null)).map_err(ApiError::invalid_request)?;
    for list in [&validation, &training, &calibration] {
        check_example_files(&shared, &who.org, list.as_ref())?;
    }
    let mut store = shared.agents.store.lock();
    let (blueprint_id, _) = blueprint_values(&store, &who.org, &reference)?;
    let record = json!({
        "id": type_id("opt"), "name": text_field(&body, "name")?.unwrap_or_default(), "blueprint_id": blueprint_id,
        "objective": objective, "budget": {"max_trials": max_trials}, "status": "running",
        "progress": {"pending": max_trials, "running": 0, "completed": 0, "failed": 0, "canceled": 0},
        "validation_examples": validation, "training_examples": training,
        "calibration_examples": calibration,
        "search_space": body.get("search_space"), "overrides": body.get("overrides"), "constraints": body.get("constraints"),
        "created_at": now(), "started_at": now(), "completed_at": null, "error": null,
    });
    let id = record["id"].as_str().unwrap_or_default().to_string();
    store.optimizations.push(JsonRec { org: who.org, json: record.clone() });
    drop(store);
    shared.jobs.spawn("optimization", Arc::new(TrialJob { shared: shared.clone(), optimization_id: id, number: 0 }), None);
    ok(StatusCode::CREATED, record)
}

async fn list_optimizations(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let store = shared.agents.store.lock();
    list_json(&store.optimizations, &who.org, &Params::parse(q.as_deref()), shared.page_size)
}

async fn get_optimization(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    let rec = find_json(&mut store.optimizations, &who.org, &id, "Optimization")?;
    ok(StatusCode::OK, rec.json.clone())
}

async fn cancel_optimization(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    cancel_json(find_json(&mut store.optimizations, &who.org, &id, "Optimization")?)?;
    // The trial under way stops with it (the executor drops a stopped job without a word).
    for (_, trial) in store.trials.iter_mut().filter(|(o, t)| *o == id && t.status().is_none_or(|s| !s.is_terminal())) {
        trial.set("status", json!(Status::Canceled.as_str()));
        trial.set("completed_at", json!(now()));
    }
    super::work::progress(&mut store, &id);
    // The answer is the record as the cancel left it, trials and counts included.
    let rec = find_json(&mut store.optimizations, &who.org, &id, "Optimization")?;
    ok(StatusCode::OK, public(&rec.json))
}

async fn delete_optimization(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let who = caller(&shared, &headers)?;
    let mut store = shared.agents.store.lock();
    deletable(find_json(&mut store.optimizations, &who.org, &id, "Optimization")?)?;
    store.optimizations.retain(|o| o.id() != id);
    store.trials.retain(|(o, _)| *o != id);
    no_content()
}

async fn list_trials(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let who = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let mut store = shared.agents.store.lock();
    find_json(&mut store.optimizations, &who.org, &id, "Optimization")?;
    let items = store.trials.iter().rev().filter(|(o, t)| *o == id && params.get("status").is_none_or(|s| Status::parse(s) == t.status()))
        .map(|(_, t)| (t.id(), t.json.clone())).collect();
    ok(StatusCode::OK, page(items, &params, shared.page_size)?)
}

/// Promote: a blueprint of the caller's organization carrying the trial's values. When the
/// optimized blueprint is the organization's own active version, the promoted one replaces it
/// (a new version of its key); otherwise (a canonical blueprint) it is registered under
/// `blueprint_key`, by default `<key>-<trial id>`.
async fn promote_trial(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path((id, trial_id)): Path<(String, String)>, body: axum::body::Bytes) -> Answer {
    let who = caller(&shared, &headers)?;
    let body = object(&body)?;
    let mut store = shared.agents.store.lock();
    let blueprint_id = find_json(&mut store.optimizations, &who.org, &id, "Optimization")?.json["blueprint_id"].as_str().unwrap_or_default().to_string();
    let trial = store.trials.iter().find(|(o, t)| *o == id && t.id() == trial_id).map(|(_, t)| t.json.clone())
        .ok_or_else(|| not_found("Trial"))?;
    if trial["status"] != json!("completed") {
        return Err(conflict("Only a completed trial can be promoted."));
    }
    let source = store.blueprint(&who.org, &blueprint_id).cloned().ok_or_else(|| not_found("Blueprint"))?;
    let replaces = source.org.as_deref() == Some(who.org.as_str()) && source.active && !body.contains_key("blueprint_key");
    let key = match text_field(&body, "blueprint_key")? {
        Some(k) => k,
        None if replaces => source.key.clone(),
        None => format!("{}-{trial_id}", source.key),
    };
    if !replaces && store.blueprints.iter().any(|b| b.active && b.key == key && b.org.as_deref() == Some(who.org.as_str())) {
        return Err(conflict(format!("A blueprint with key {key:?} already exists.")));
    }
    let mut document = source.document.clone();
    document["values"] = layered(source.document.get("values").unwrap_or(&Value::Null), &trial["trial_values"]);
    if replaces {
        store.archive(&source.id);
    }
    let seq = store.next_seq();
    let rec = BlueprintRec {
        id: type_id("blp"), lineage: if replaces { source.lineage.clone() } else { key.clone() }, key,
        name: text_field(&body, "name")?.unwrap_or_else(|| source.name.clone()),
        description: text_field(&body, "description")?.unwrap_or_else(|| source.description.clone()),
        document, yaml: None, org: Some(who.org), active: true, created: std::time::SystemTime::now(), seq,
    };
    let answer = rec.full(false);
    store.blueprints.push(rec);
    ok(StatusCode::CREATED, answer)
}

//! The model catalogue: which model ids an organization may query, and which stand-in model
//! (reasoner or encoder) answers each. The default is every version the spec and public code
//! show; an emulator, or one organization, can be given its own list.

use serde_json::Value;

use crate::wire::models::{split_model_id, ModelFamily};

/// Versions seen in the spec and in public code (wire notes, "Direct query"). Each is served
/// under both spellings of its family, because users' code sends the live prefix and the spec
/// writes the neutral one.
const REASONER_VERSIONS: &[&str] = &[
    "c2_6_8b_fp8_260424d7a55d5e",
    "c2_5_8b_260413b723a9ab",
    "c2_4_7b_251215a172f6d7",
    "c2_4_3b_251215dfe6a746",
    "c2_3_7b_2508014e10af56",
];
const ENCODER_VERSIONS: &[&str] = &[
    "encoder_embeddings_01",
    "omega_embeddings_1_4",
    "omega_embeddings_01",
    "omega_embeddings_surface_01",
];

/// How many ids an unknown-model error suggests.
pub const SUGGESTIONS: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: String,
    pub family: ModelFamily,
}

impl ModelEntry {
    /// An entry from an id and, optionally, a family word (`reasoner`, `encoder`, or a live
    /// spelling). A known prefix decides the family by itself; any other id needs `family`.
    pub fn new(id: &str, family: Option<&str>) -> Result<ModelEntry, String> {
        if id.trim().is_empty() || id.trim() != id {
            return Err(format!("model id {id:?} must be non-empty, without surrounding spaces"));
        }
        let given = match family {
            None => None,
            Some(word) => Some(ModelFamily::from_word(word).ok_or_else(|| {
                format!("family of {id:?} is {word:?}; it takes \"reasoner\" or \"encoder\"")
            })?),
        };
        let (prefix, _) = split_model_id(id);
        let implied = prefix.and_then(ModelFamily::from_word);
        match (implied, given) {
            (Some(i), Some(g)) if i != g => Err(format!(
                "{id:?} names the {} family by its prefix, but its family is given as {:?}",
                i.name(),
                g.name()
            )),
            (Some(f), _) | (None, Some(f)) => Ok(ModelEntry { id: id.to_string(), family: f }),
            (None, None) => Err(format!(
                "the prefix of {id:?} names no family the emulator knows (Reasoner or Newton, \
                 Encoder or OmegaEncoder); give its family: {{\"id\": {id:?}, \"family\": \"reasoner\"}} \
                 (or \"encoder\") in Emulator(models=...), --model {id}=reasoner (or =encoder) on the \
                 command line"
            )),
        }
    }

    /// An entry as JSON gives it: `"<id>"` or `{"id": "<id>", "family": "reasoner"}`.
    pub fn from_json(v: &Value) -> Result<ModelEntry, String> {
        match v {
            Value::String(id) => ModelEntry::new(id, None),
            Value::Object(m) => {
                let id = m.get("id").and_then(Value::as_str).ok_or("a model entry needs an 'id' string")?;
                let family = match m.get("family") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(f)) => Some(f.as_str()),
                    Some(_) => return Err(format!("the 'family' of {id:?} must be a string")),
                };
                if let Some(other) = m.keys().find(|k| *k != "id" && *k != "family") {
                    return Err(format!("a model entry takes 'id' and 'family', not {other:?}"));
                }
                ModelEntry::new(id, family)
            }
            _ => Err("a model entry is an id string or an object {\"id\", \"family\"}".to_string()),
        }
    }

    /// The id's own prefix (`None` for an id without `::`).
    pub fn prefix(&self) -> Option<&str> {
        split_model_id(&self.id).0
    }

    pub fn version(&self) -> &str {
        split_model_id(&self.id).1
    }

    /// Ids with a prefix of the platform's are platform models; anything else was added for
    /// the organization (a fine-tuned model, say), which is what `scope=org` lists.
    pub fn is_platform(&self) -> bool {
        crate::wire::models::family_of_id(&self.id).is_some()
    }
}

/// The ids one organization may query, in listing order, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalogue {
    entries: Vec<ModelEntry>,
}

impl Default for Catalogue {
    fn default() -> Self {
        let mut entries = Vec::new();
        for (family, versions) in [(ModelFamily::Reasoner, REASONER_VERSIONS), (ModelFamily::Encoder, ENCODER_VERSIONS)] {
            for version in versions {
                for prefix in family.prefixes() {
                    entries.push(ModelEntry { id: format!("{prefix}::{version}"), family });
                }
            }
        }
        Catalogue { entries }
    }
}

impl Catalogue {
    /// A catalogue of these entries; a repeated id is kept once, unless its families differ.
    pub fn new(entries: Vec<ModelEntry>) -> Result<Catalogue, String> {
        let mut kept: Vec<ModelEntry> = Vec::with_capacity(entries.len());
        for entry in entries {
            match kept.iter().find(|e| e.id == entry.id) {
                Some(e) if e.family != entry.family => {
                    return Err(format!("{:?} is given twice, as {} and as {}", entry.id, e.family.name(), entry.family.name()))
                }
                Some(_) => {}
                None => kept.push(entry),
            }
        }
        Ok(Catalogue { entries: kept })
    }

    /// A catalogue as JSON gives it: an array of ids and `{"id", "family"}` objects.
    pub fn from_json(v: &Value) -> Result<Catalogue, String> {
        let list = v.as_array().ok_or("models must be a list of model ids or {\"id\", \"family\"} entries")?;
        Catalogue::new(list.iter().map(ModelEntry::from_json).collect::<Result<Vec<_>, _>>()?)
    }

    pub fn entries(&self) -> &[ModelEntry] {
        &self.entries
    }

    /// The family of an id this catalogue accepts; `None` when it does not accept it.
    pub fn family_of(&self, id: &str) -> Option<ModelFamily> {
        self.entries.iter().find(|e| e.id == id).map(|e| e.family)
    }

    /// The family a prefix or family word stands for here: a known spelling, or the prefix of
    /// one of this catalogue's own entries (a custom family), case-insensitively.
    fn family_of_prefix(&self, word: &str) -> Option<ModelFamily> {
        ModelFamily::from_word(word)
            .or_else(|| self.entries.iter().find(|e| e.prefix().is_some_and(|p| p.eq_ignore_ascii_case(word))).map(|e| e.family))
    }

    /// The entries a `model_family` filter selects: a family in either spelling selects the
    /// whole family; a custom prefix of this catalogue selects the ids with that prefix.
    /// `None` when the word is neither.
    pub fn select_family(&self, word: &str) -> Option<Vec<&ModelEntry>> {
        if let Some(family) = ModelFamily::from_word(word) {
            return Some(self.entries.iter().filter(|e| e.family == family).collect());
        }
        let own: Vec<&ModelEntry> = self.entries.iter().filter(|e| e.prefix().is_some_and(|p| p.eq_ignore_ascii_case(word.trim()))).collect();
        (!own.is_empty()).then_some(own)
    }

    /// Up to `n` accepted ids closest to `id`: those of its family first (when its prefix tells
    /// the family), then by edit distance between versions, then the same prefix spelling
    /// first, then catalogue order.
    pub fn closest(&self, id: &str, n: usize) -> Vec<&str> {
        let (prefix, version) = split_model_id(id);
        let family = prefix.and_then(|p| self.family_of_prefix(p));
        let version = version.to_lowercase();
        let mut ranked: Vec<(bool, usize, bool, usize, &str)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let other_family = family.is_some_and(|f| f != e.family);
                let other_prefix = !(prefix.zip(e.prefix()).is_some_and(|(a, b)| a.eq_ignore_ascii_case(b)));
                (other_family, edit_distance(&version, &e.version().to_lowercase()), other_prefix, i, e.id.as_str())
            })
            .collect();
        ranked.sort_unstable();
        ranked.into_iter().take(n).map(|r| r.4).collect()
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_serves_every_version_under_both_spellings() {
        let c = Catalogue::default();
        assert_eq!(c.entries().len(), 2 * (REASONER_VERSIONS.len() + ENCODER_VERSIONS.len()));
        for id in [
            "Reasoner::c2_4_7b_251215a172f6d7",
            "Newton::c2_4_7b_251215a172f6d7",
            "Newton::c2_6_8b_fp8_260424d7a55d5e",
            "Reasoner::c2_3_7b_2508014e10af56",
        ] {
            assert_eq!(c.family_of(id), Some(ModelFamily::Reasoner), "{id}");
        }
        for id in ["Encoder::encoder_embeddings_01", "OmegaEncoder::encoder_embeddings_01", "OmegaEncoder::omega_embeddings_surface_01"] {
            assert_eq!(c.family_of(id), Some(ModelFamily::Encoder), "{id}");
        }
        assert_eq!(c.family_of("Newton::nope"), None);
        assert_eq!(c.family_of("newton::c2_4_7b_251215a172f6d7"), None, "ids match exactly");
        assert!(c.entries().iter().all(ModelEntry::is_platform));
    }

    #[test]
    fn entries_take_their_family_from_the_prefix_or_from_the_caller() {
        assert_eq!(ModelEntry::new("Newton::x", None).unwrap().family, ModelFamily::Reasoner);
        assert_eq!(ModelEntry::new("Acme::ft-1", Some("Encoder")).unwrap().family, ModelFamily::Encoder);
        assert!(ModelEntry::new("Acme::ft-1", None).unwrap_err().contains("family"));
        assert!(ModelEntry::new("Acme::ft-1", Some("vision")).unwrap_err().contains("vision"));
        assert!(ModelEntry::new("Newton::x", Some("encoder")).is_err());
        assert!(ModelEntry::new("Newton::x", Some("reasoner")).is_ok());
        assert!(ModelEntry::new("", Some("reasoner")).is_err());
        assert!(!ModelEntry::new("Acme::ft-1", Some("reasoner")).unwrap().is_platform());
        let e = ModelEntry::from_json(&json!({"id": "Acme::ft-1", "family": "reasoner"})).unwrap();
        assert_eq!((e.prefix(), e.version()), (Some("Acme"), "ft-1"));
        assert!(ModelEntry::from_json(&json!({"id": "Acme::ft-1", "familly": "reasoner"})).is_err());
        assert!(ModelEntry::from_json(&json!(3)).is_err());
        assert!(Catalogue::from_json(&json!("Newton::x")).unwrap_err().contains("list"));
        let c = Catalogue::from_json(&json!(["Newton::x", {"id": "Acme::y", "family": "encoder"}])).unwrap();
        assert_eq!(c.family_of("Acme::y"), Some(ModelFamily::Encoder));
    }

    #[test]
    fn repeated_ids_are_kept_once_unless_they_disagree() {
        let e = |id, f| ModelEntry::new(id, f).unwrap();
        let c = Catalogue::new(vec![e("Newton::a", None), e("Newton::a", Some("reasoner"))]).unwrap();
        assert_eq!(c.entries().len(), 1);
        assert!(Catalogue::new(vec![e("Acme::a", Some("reasoner")), e("Acme::a", Some("encoder"))]).is_err());
    }

    #[test]
    fn family_filter_takes_both_spellings_and_custom_prefixes() {
        let mut entries = Catalogue::default().entries().to_vec();
        entries.push(ModelEntry::new("Acme::ft-1", Some("encoder")).unwrap());
        let c = Catalogue::new(entries).unwrap();
        let ids = |word: &str| c.select_family(word).map(|v| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
        assert_eq!(ids("encoder"), ids("OMEGAENCODER"));
        assert_eq!(ids("newton").unwrap().len(), 2 * REASONER_VERSIONS.len());
        assert!(ids("Encoder").unwrap().contains(&"Acme::ft-1".to_string()));
        assert_eq!(ids("acme").unwrap(), vec!["Acme::ft-1".to_string()]);
        assert_eq!(ids("Vision"), None);
    }

    #[test]
    fn suggestions_prefer_the_family_then_the_nearest_version() {
        let c = Catalogue::default();
        // One character off: the same version first, in the caller's spelling first.
        assert_eq!(
            c.closest("Newton::c2_4_7b_251215a172f6d8", 3),
            vec!["Newton::c2_4_7b_251215a172f6d7", "Reasoner::c2_4_7b_251215a172f6d7", "Newton::c2_4_3b_251215dfe6a746"]
        );
        // An encoder-looking version under a reasoning prefix still gets reasoning ids.
        assert!(c.closest("Newton::omega_embeddings_01", 3).iter().all(|id| c.family_of(id) == Some(ModelFamily::Reasoner)));
        // An unknown prefix tells no family: the nearest versions win, whatever their family.
        assert_eq!(c.closest("Omega::omega_embeddings_1_4", 1), vec!["Encoder::omega_embeddings_1_4"]);
        assert_eq!(c.closest("newton::C2_5_8B_260413B723A9AB", 1), vec!["Newton::c2_5_8b_260413b723a9ab"]);
        assert!(Catalogue::new(Vec::new()).unwrap().closest("Newton::x", 3).is_empty());
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}

//! `GET /models` records, and the model families: which id prefixes name which family.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Values the spec gives for the `scope` filter.
pub const MODEL_SCOPES: &[&str] = &["platform", "org", "all"];

/// The two kinds of model `/query` serves: text out, or embeddings out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelFamily {
    Reasoner,
    Encoder,
}

/// Id prefixes (`<prefix>::<version>`) and their family. The spec writes the neutral words;
/// the live service, and so users' code, sends its own names instead (wire notes, Direct
/// query). The neutral spelling of each family comes first.
pub const FAMILY_PREFIXES: &[(&str, ModelFamily)] = &[
    ("Reasoner", ModelFamily::Reasoner),
    ("Newton", ModelFamily::Reasoner),
    ("Encoder", ModelFamily::Encoder),
    ("OmegaEncoder", ModelFamily::Encoder),
];

impl ModelFamily {
    /// The lowercase neutral name, as `Emulator(models=[{"family": ...}])` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ModelFamily::Reasoner => "reasoner",
            ModelFamily::Encoder => "encoder",
        }
    }

    /// The family a prefix or family word names, in either spelling, case-insensitively
    /// (`reasoner`, `Newton`, `ENCODER`, `omegaencoder`); `None` for any other word.
    pub fn from_word(word: &str) -> Option<ModelFamily> {
        FAMILY_PREFIXES
            .iter()
            .find(|(prefix, _)| prefix.eq_ignore_ascii_case(word.trim()))
            .map(|(_, family)| *family)
    }

    /// The prefixes that spell this family, the neutral one first.
    pub fn prefixes(self) -> impl Iterator<Item = &'static str> {
        FAMILY_PREFIXES.iter().filter(move |(_, f)| *f == self).map(|(p, _)| *p)
    }

    /// `'Reasoner::<version>' or 'Newton::<version>'`, for messages that show how an id looks.
    pub fn id_examples(self) -> String {
        self.prefixes().map(|p| format!("'{p}::<version>'")).collect::<Vec<_>>().join(" or ")
    }
}

/// `(prefix, version)` of `<prefix>::<version>`; an id without `::` has no prefix.
pub fn split_model_id(id: &str) -> (Option<&str>, &str) {
    match id.split_once("::") {
        Some((prefix, version)) => (Some(prefix), version),
        None => (None, id),
    }
}

/// The family an id's prefix names, when it is one of [`FAMILY_PREFIXES`]. `None` says
/// nothing is known (a newer family, a user's fine-tuned model), not that the id is wrong.
pub fn family_of_id(id: &str) -> Option<ModelFamily> {
    split_model_id(id).0.and_then(ModelFamily::from_word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_name_the_same_family() {
        assert_eq!(family_of_id("Reasoner::c2_4_7b_251215a172f6d7"), Some(ModelFamily::Reasoner));
        assert_eq!(family_of_id("Newton::c2_6_8b_fp8_260424d7a55d5e"), Some(ModelFamily::Reasoner));
        assert_eq!(family_of_id("Encoder::encoder_embeddings_01"), Some(ModelFamily::Encoder));
        assert_eq!(family_of_id("OmegaEncoder::omega_embeddings_1_4"), Some(ModelFamily::Encoder));
        assert_eq!(ModelFamily::from_word("OMEGAENCODER"), Some(ModelFamily::Encoder));
        assert_eq!(ModelFamily::from_word(" newton "), Some(ModelFamily::Reasoner));
    }

    #[test]
    fn unknown_prefixes_are_unknown_not_errors() {
        assert_eq!(family_of_id("Acme::ft-1"), None);
        assert_eq!(family_of_id("c2_4_7b"), None);
        assert_eq!(split_model_id("Acme::ft::2"), (Some("Acme"), "ft::2"));
        assert_eq!(ModelFamily::Encoder.id_examples(), "'Encoder::<version>' or 'OmegaEncoder::<version>'");
    }
}

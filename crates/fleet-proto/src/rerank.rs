//! A rerank request's payload (content type `application/json`): one query
//! and the documents to score against it. The answer lists the documents by
//! score, best first (docs/protocol.md).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankRequest {
    pub query: String,
    pub documents: Vec<String>,
}

impl RerankRequest {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("strings always serialise")
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_other_shapes() {
        let request = RerankRequest { query: "q".into(), documents: vec!["a".into(), "b".into()] };
        assert_eq!(RerankRequest::from_json(&request.to_json()).unwrap(), request);
        assert!(RerankRequest::from_json(br#"{"query": "q"}"#).is_err());
        assert!(RerankRequest::from_json(br#"{"query": "q", "documents": [1]}"#).is_err());
        assert!(RerankRequest::from_json(br#"{"query": "q", "documents": [], "top": 3}"#).is_err());
    }
}

//! ACP prompt content blocks -> the user message the model reads.
//!
//! Text is passed through. A `resource_link` (what editors send for an
//! @-mention when they do not embed the file) becomes a line naming the
//! resource, so the model knows it exists and can read it. An embedded text
//! `resource` is included whole, fenced and labelled with its URI. Images are
//! accepted only for a model configured with `vision = true`; audio never
//! (lathe does not advertise it).

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource};

use crate::model::UserPart;

/// A prompt the model cannot take, with a message for the client.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnsupportedContent(pub String);

/// Converts the prompt's blocks. `vision` says whether images are allowed.
pub fn to_user_parts(
    blocks: Vec<ContentBlock>,
    vision: bool,
    model_name: &str,
) -> Result<Vec<UserPart>, UnsupportedContent> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.into_iter().enumerate() {
        match block {
            ContentBlock::Text(text) => parts.push(UserPart::Text { text: text.text }),
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[@{}]({})", link.name, link.uri);
                if let Some(description) = link.description.filter(|d| !d.is_empty()) {
                    line.push_str(&format!(": {description}"));
                }
                parts.push(UserPart::Text { text: line });
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                EmbeddedResourceResource::TextResourceContents(resource) => {
                    let fence = fence_for(&resource.text);
                    parts.push(UserPart::Text {
                        text: format!(
                            "<context uri=\"{}\">\n{fence}\n{}\n{fence}\n</context>",
                            resource.uri,
                            resource.text.trim_end_matches('\n')
                        ),
                    });
                }
                EmbeddedResourceResource::BlobResourceContents(resource) => {
                    let mime = resource.mime_type.unwrap_or_default();
                    if vision && mime.starts_with("image/") {
                        parts.push(UserPart::Image { mime_type: mime, data: resource.blob });
                    } else {
                        parts.push(UserPart::Text {
                            text: format!(
                                "[binary resource {} ({}) not shown]",
                                resource.uri,
                                if mime.is_empty() { "unknown type" } else { &mime }
                            ),
                        });
                    }
                }
                _ => {
                    return Err(UnsupportedContent(format!(
                        "prompt[{index}]: this kind of embedded resource is not supported"
                    )));
                }
            },
            ContentBlock::Image(image) => {
                if !vision {
                    return Err(UnsupportedContent(format!(
                        "prompt[{index}]: the model \"{model_name}\" does not accept images (set vision = true for it in the config if it does)"
                    )));
                }
                parts.push(UserPart::Image { mime_type: image.mime_type, data: image.data });
            }
            ContentBlock::Audio(_) => {
                return Err(UnsupportedContent(format!("prompt[{index}]: audio prompts are not supported")));
            }
            _ => return Err(UnsupportedContent(format!("prompt[{index}]: this content type is not supported"))),
        }
    }
    if parts.is_empty() {
        return Err(UnsupportedContent("prompt: at least one content block is required".to_owned()));
    }
    Ok(parts)
}

/// A code fence longer than any backtick run in `text`.
fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blocks(value: serde_json::Value) -> Vec<ContentBlock> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_links_and_embedded_resources() {
        let parts = to_user_parts(
            blocks(json!([
                {"type":"text","text":"Explain this"},
                {"type":"resource_link","uri":"file:///p/src/main.rs","name":"main.rs"},
                {"type":"resource","resource":{"uri":"file:///p/a.md","text":"has ``` inside\n","mimeType":"text/markdown"}}
            ])),
            false,
            "m",
        )
        .unwrap();
        assert_eq!(parts[0], UserPart::Text { text: "Explain this".into() });
        assert_eq!(parts[1], UserPart::Text { text: "[@main.rs](file:///p/src/main.rs)".into() });
        let UserPart::Text { text } = &parts[2] else { panic!() };
        assert_eq!(text, "<context uri=\"file:///p/a.md\">\n````\nhas ``` inside\n````\n</context>");
    }

    #[test]
    fn images_need_vision() {
        let image = json!([{"type":"image","data":"aGk=","mimeType":"image/png"}]);
        let err = to_user_parts(blocks(image.clone()), false, "qwen").unwrap_err();
        assert!(err.0.contains("vision = true"), "{err}");
        let parts = to_user_parts(blocks(image), true, "qwen").unwrap();
        assert_eq!(parts, vec![UserPart::Image { mime_type: "image/png".into(), data: "aGk=".into() }]);
    }

    #[test]
    fn audio_and_empty_prompts_are_refused() {
        assert!(to_user_parts(blocks(json!([{"type":"audio","data":"","mimeType":"audio/wav"}])), true, "m").is_err());
        assert!(to_user_parts(vec![], true, "m").is_err());
    }
}

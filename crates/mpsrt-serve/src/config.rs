//! `config.pbtxt` handling: protobuf text format and JSON through prost-reflect, auto-complete, checks.

use crate::backend::ModelIo;
use crate::proto::inference::{
    model_config::SchedulingChoice, model_instance_group::Kind, ModelConfig, ModelDynamicBatching,
    ModelInput, ModelOutput,
};
use crate::proto::DESCRIPTORS;
use crate::types::{ServeError, TritonDType};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use std::sync::OnceLock;

/// The descriptor pool of the vendored protos (built once; the bytes are embedded at compile time).
pub fn pool() -> Result<&'static DescriptorPool, ServeError> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| ServeError::internal(format!("embedded descriptors are invalid: {e}")))
}

fn descriptor(name: &str) -> Result<MessageDescriptor, ServeError> {
    pool()?
        .get_message_by_name(name)
        .ok_or_else(|| ServeError::internal(format!("message {name} missing from descriptors")))
}

/// Inserts the optional `:` of `field [ {...}, {...} ]` lists, which prost-reflect's text-format
/// parser requires but Triton's configs (and the protobuf spec) omit. Lexical only: it skips
/// strings and `#` comments and touches nothing else; the parsing itself stays prost-reflect's.
fn add_list_colons(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    let mut last_sig: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
                last_sig = Some(c);
            }
            '#' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '[' if last_sig.is_some_and(|p| p.is_ascii_alphanumeric() || p == '_') => {
                out.push_str(": [");
                last_sig = Some('[');
            }
            _ => {
                out.push(c);
                if !c.is_whitespace() {
                    last_sig = Some(c);
                }
            }
        }
    }
    out
}

/// Parses protobuf text format (config.pbtxt) against model_config.proto.
pub fn parse_pbtxt(text: &str) -> Result<ModelConfig, ServeError> {
    let text = add_list_colons(text);
    let dm = DynamicMessage::parse_text_format(descriptor("inference.ModelConfig")?, &text)
        .map_err(|e| ServeError::invalid(format!("failed to parse config.pbtxt: {e}")))?;
    ModelConfig::decode(dm.encode_to_vec().as_slice())
        .map_err(|e| ServeError::internal(format!("config re-decode failed: {e}")))
}

/// Parses a model config given as protobuf JSON (the `config` parameter of a load request).
pub fn parse_json(text: &str) -> Result<ModelConfig, ServeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let dm = DynamicMessage::deserialize(descriptor("inference.ModelConfig")?, &mut de)
        .map_err(|e| ServeError::invalid(format!("failed to parse model config JSON: {e}")))?;
    ModelConfig::decode(dm.encode_to_vec().as_slice())
        .map_err(|e| ServeError::internal(format!("config re-decode failed: {e}")))
}

/// Renders any generated message as protobuf JSON (proto field names, defaults printed).
/// `stringify_64` chooses Triton's style: strings for int64 in configs, numbers in statistics.
pub fn to_json<M: Message>(
    msg: &M,
    full_name: &str,
    stringify_64: bool,
) -> Result<serde_json::Value, ServeError> {
    let dm = DynamicMessage::decode(descriptor(full_name)?, msg.encode_to_vec().as_slice())
        .map_err(|e| ServeError::internal(format!("re-decode of {full_name} failed: {e}")))?;
    let opts = SerializeOptions::new()
        .skip_default_fields(false)
        .use_proto_field_name(true)
        .stringify_64_bit_integers(stringify_64);
    dm.serialize_with_options(serde_json::value::Serializer, &opts)
        .map_err(|e| ServeError::internal(format!("JSON rendering of {full_name} failed: {e}")))
}

/// Fills what the config leaves out from the model file, as Triton's ONNX auto-complete does.
pub fn autocomplete(config: &mut ModelConfig, io: &ModelIo) {
    // Whether the file's inputs all have a dynamic leading dim decides implicit batching.
    let all_dynamic_batch =
        !io.inputs.is_empty() && io.inputs.iter().all(|t| t.dims.first() == Some(&-1));
    let had_io = !config.input.is_empty() || !config.output.is_empty();
    if config.max_batch_size == 0 && all_dynamic_batch && !had_io {
        config.max_batch_size = 4;
        if config.scheduling_choice.is_none() {
            config.scheduling_choice =
                Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching::default()));
        }
    }
    let batching = config.max_batch_size > 0;
    let strip = |dims: &[i64]| -> Vec<i64> {
        if batching && !dims.is_empty() {
            dims[1..].to_vec()
        } else {
            dims.to_vec()
        }
    };
    if config.input.is_empty() {
        config.input = io
            .inputs
            .iter()
            .map(|t| ModelInput {
                name: t.name.clone(),
                data_type: t.datatype.to_config() as i32,
                dims: strip(&t.dims),
                ..Default::default()
            })
            .collect();
    }
    if config.output.is_empty() {
        config.output = io
            .outputs
            .iter()
            .map(|t| ModelOutput {
                name: t.name.clone(),
                data_type: t.datatype.to_config() as i32,
                dims: strip(&t.dims),
                ..Default::default()
            })
            .collect();
    }
}

/// Rejects configs the server cannot honour, with a message naming the field.
pub fn validate(config: &ModelConfig) -> Result<(), ServeError> {
    let name = &config.name;
    if config.max_batch_size < 0 {
        return Err(ServeError::invalid(format!(
            "model '{name}': max_batch_size must be >= 0, got {}",
            config.max_batch_size
        )));
    }
    if config.input.is_empty() {
        return Err(ServeError::invalid(format!("model '{name}': config has no inputs")));
    }
    let check_dims = |what: &str, tname: &str, dims: &[i64]| {
        if dims.iter().any(|&d| d < -1 || d == 0) {
            return Err(ServeError::invalid(format!(
                "model '{name}': {what} '{tname}' has invalid dims {dims:?}"
            )));
        }
        Ok(())
    };
    for i in &config.input {
        dtype_of(config, &i.name, i.data_type)?;
        check_dims("input", &i.name, &i.dims)?;
        if let Some(r) = &i.reshape {
            check_dims("input reshape", &i.name, &r.shape)?;
        }
    }
    for o in &config.output {
        dtype_of(config, &o.name, o.data_type)?;
        check_dims("output", &o.name, &o.dims)?;
    }
    for g in &config.instance_group {
        if g.count < 0 {
            return Err(ServeError::invalid(format!(
                "model '{name}': instance_group count must be >= 0"
            )));
        }
        if Kind::try_from(g.kind).unwrap_or(Kind::Auto) == Kind::Model {
            return Err(ServeError::unsupported(format!(
                "model '{name}': instance_group kind KIND_MODEL is not supported"
            )));
        }
    }
    match &config.scheduling_choice {
        Some(SchedulingChoice::SequenceBatching(_)) => Err(ServeError::unsupported(format!(
            "model '{name}': sequence_batching is not supported"
        ))),
        Some(SchedulingChoice::EnsembleScheduling(_)) => Err(ServeError::unsupported(format!(
            "model '{name}': ensemble_scheduling is not supported"
        ))),
        _ => Ok(()),
    }
}

/// A written config must describe the model file: the same input names, outputs that exist, the
/// same data types, and dims that agree (the batch dim is the file's leading `-1` when the model
/// batches; `-1` on either side matches anything). Checked at load so a mismatch makes the model
/// UNAVAILABLE with the difference named, instead of READY with every inference failing.
pub fn check_against_model(config: &ModelConfig, io: &ModelIo) -> Result<(), ServeError> {
    let name = &config.name;
    let err = |m: String| ServeError::unavailable(format!("model '{name}': {m}"));
    let names = |v: &[crate::backend::TensorIo]| {
        v.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
    };
    let batching = config.max_batch_size > 0;
    let check = |what: &str,
                 tname: &str,
                 dt: i32,
                 dims: &[i64],
                 reshaped: bool,
                 file: &[crate::backend::TensorIo]|
     -> Result<(), ServeError> {
        let Some(t) = file.iter().find(|t| t.name == tname) else {
            return Err(err(format!(
                "the config's {what} '{tname}' is not an {what} of the model file (its {what}s: {})",
                names(file)
            )));
        };
        let want = dtype_of(config, tname, dt)?;
        if want != t.datatype {
            return Err(err(format!(
                "{what} '{tname}' is {} in the config but {} in the model file",
                want, t.datatype
            )));
        }
        // With a reshape the config dims are what clients see, not what the file declares; an
        // empty file shape means the file does not say.
        if reshaped || t.dims.is_empty() {
            return Ok(());
        }
        let file_dims: &[i64] = if batching {
            match t.dims.split_first() {
                Some((-1, rest)) => rest,
                _ => {
                    return Err(err(format!(
                        "{what} '{tname}' has dims {:?} in the model file; with max_batch_size > 0 the first dim must be dynamic (-1)",
                        t.dims
                    )))
                }
            }
        } else {
            &t.dims
        };
        let agree = file_dims.len() == dims.len()
            && file_dims.iter().zip(dims).all(|(&f, &c)| f == -1 || c == -1 || f == c);
        if !agree {
            return Err(err(format!(
                "{what} '{tname}' has dims {dims:?} in the config but {file_dims:?} in the model file{}",
                if batching { " (batch dim excluded)" } else { "" }
            )));
        }
        Ok(())
    };
    for i in &config.input {
        check("input", &i.name, i.data_type, &i.dims, i.reshape.is_some(), &io.inputs)?;
    }
    for t in &io.inputs {
        if !config.input.iter().any(|i| i.name == t.name) {
            return Err(err(format!(
                "the model file's input '{}' is missing from the config",
                t.name
            )));
        }
    }
    for o in &config.output {
        check("output", &o.name, o.data_type, &o.dims, o.reshape.is_some(), &io.outputs)?;
    }
    Ok(())
}

/// The `string_value` of `parameters { key: KEY value: { string_value: ... } }` in a config,
/// for backends to read their options (the engine's `precision`).
pub fn string_parameter<'a>(config: &'a ModelConfig, key: &str) -> Option<&'a str> {
    config.parameters.get(key).map(|p| p.string_value.as_str())
}

/// The wire dtype of a config tensor, or an error naming it.
pub fn dtype_of(config: &ModelConfig, tensor: &str, dt: i32) -> Result<TritonDType, ServeError> {
    crate::proto::inference::DataType::try_from(dt)
        .ok()
        .and_then(TritonDType::from_config)
        .ok_or_else(|| {
            ServeError::invalid(format!(
                "model '{}': tensor '{tensor}' has invalid data_type {dt}",
                config.name
            ))
        })
}

/// Dims clients see in metadata: a leading -1 batch dim when the model batches.
pub fn client_shape(config: &ModelConfig, dims: &[i64]) -> Vec<i64> {
    let mut s = Vec::with_capacity(dims.len() + 1);
    if config.max_batch_size > 0 {
        s.push(-1);
    }
    s.extend_from_slice(dims);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::TensorIo;

    #[test]
    fn list_colons_are_inserted_only_where_missing() {
        let cases = [
            ("input [ { name: \"a\" } ]", "input : [ { name: \"a\" } ]"),
            ("input: [ { } ]", "input: [ { } ]"),
            ("dims: [ 16 ]", "dims: [ 16 ]"),
            ("name: \"x [y]\" output [ ]", "name: \"x [y]\" output : [ ]"),
            ("# input [\noutput [ ]", "# input [\noutput : [ ]"),
            ("name: 'it\\'s [' a [ ]", "name: 'it\\'s [' a : [ ]"),
        ];
        for (input, want) in cases {
            assert_eq!(add_list_colons(input), want, "{input}");
        }
    }

    #[test]
    fn autocomplete_follows_triton_rules() {
        let io = |dims: &[i64]| ModelIo {
            inputs: vec![TensorIo {
                name: "x".into(),
                datatype: TritonDType::Fp32,
                dims: dims.to_vec(),
            }],
            outputs: vec![TensorIo {
                name: "y".into(),
                datatype: TritonDType::Fp32,
                dims: dims.to_vec(),
            }],
        };
        // (file dims, max_batch_size before, expected max_batch_size, dynamic batching, input dims)
        let cases = [
            (vec![-1, 3], 0, 4, true, vec![3]),
            (vec![2, 3], 0, 0, false, vec![2, 3]),
            (vec![-1, 3], 2, 2, false, vec![3]),
        ];
        for (dims, mbs, want_mbs, want_db, want_dims) in cases {
            let mut c = ModelConfig { max_batch_size: mbs, ..Default::default() };
            autocomplete(&mut c, &io(&dims));
            assert_eq!(c.max_batch_size, want_mbs, "{dims:?}");
            assert_eq!(c.scheduling_choice.is_some(), want_db, "{dims:?}");
            assert_eq!(c.input[0].dims, want_dims, "{dims:?}");
            assert_eq!(c.output[0].dims, want_dims, "{dims:?}");
            validate(&c).unwrap();
        }
    }

    #[test]
    fn config_json_round_trips_with_triton_names() {
        let c = parse_pbtxt("name: \"m\" max_batch_size: 2 input [ { name: \"a\" data_type: TYPE_FP16 dims: [ -1 ] } ]").unwrap();
        let j = to_json(&c, "inference.ModelConfig", false).unwrap();
        assert_eq!(j["input"][0]["data_type"], "TYPE_FP16");
        assert_eq!(j["input"][0]["dims"], serde_json::json!([-1]));
        assert_eq!(parse_json(&j.to_string()).unwrap(), c);
    }
}

//! A loaded model: the mapped GGUF file, its hyper-parameters, its tensors checked and placed
//! on a device, ready for contexts ([`crate::Context`]) to run it.

use crate::chat::ChatTemplate;
use crate::constraint::{ConstraintError, ConstraintVocab};
use crate::error::{LlmError, Result};
use crate::hparams::HParams;
use crate::tensors::ModelTensors;
use crate::tokenizer::Tokenizer;
use crate::weights::{Progress, WeightStore};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tessera_core::backend::Device;
use tessera_core::registry::{DeviceChoice, Registry};
use tessera_gguf::GgufFile;

/// The device of `registry` that `choice` names (the registry's one meaning of "auto"), or
/// the error listing the devices there are.
fn resolve(choice: &DeviceChoice, registry: &Registry) -> Result<Arc<dyn Device>> {
    registry.choose(choice).map_err(|_| LlmError::UnknownDevice {
        name: match choice {
            DeviceChoice::Auto => "auto".into(),
            DeviceChoice::Named(name) => name.clone(),
        },
        available: device_list(registry),
    })
}

fn device_list(registry: &Registry) -> String {
    let names: Vec<String> = registry.devices().iter().map(|d| d.name()).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A model ready to run: weights placed on one device.
pub struct Model {
    file: Arc<GgufFile>,
    hparams: HParams,
    tensors: ModelTensors,
    weights: WeightStore,
    device: Arc<dyn Device>,
    tokenizer: Tokenizer,
    chat: std::result::Result<ChatTemplate, NoTemplate>,
    /// Built on the first constrained generation.
    constraint_vocab: OnceLock<std::result::Result<Arc<ConstraintVocab>, ConstraintError>>,
}

/// Why a model has no usable chat template.
#[derive(Clone, Debug)]
enum NoTemplate {
    /// The file carries none and the architecture has no built-in one.
    Absent(String),
    /// The file's template does not parse (or is not a string).
    Broken(String),
}

impl Model {
    /// Maps the GGUF file at `path`, reads its hyper-parameters and tensors, and places the
    /// weights on `device` (`progress` sees the fraction placed and may cancel).
    pub fn load(
        path: impl AsRef<Path>,
        registry: &Registry,
        device: &DeviceChoice,
        progress: Progress<'_>,
    ) -> Result<Model> {
        let file = Arc::new(GgufFile::open(path)?);
        Model::from_file(file, registry, device, progress)
    }

    /// As [`Model::load`], from a file already opened.
    pub fn from_file(
        file: Arc<GgufFile>,
        registry: &Registry,
        device: &DeviceChoice,
        progress: Progress<'_>,
    ) -> Result<Model> {
        let hparams = HParams::from_gguf(&file)?;
        let tensors = ModelTensors::from_gguf(&file, &hparams)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let chat = chat_template(&file, &hparams, &tokenizer);
        let device = resolve(device, registry)?;
        // Placing copies weights out of the mapping: a truncated file would fault there.
        file.check_unchanged()?;
        let weights = WeightStore::place(&file, &tensors, &device, registry, progress)?;
        log::info!(
            "model {} on {}: {} weights mapped in place, {} copied",
            hparams.arch.name(),
            device.name(),
            weights.mapped_bytes(),
            weights.copied_bytes()
        );
        Ok(Model {
            file,
            hparams,
            tensors,
            weights,
            device,
            tokenizer,
            chat,
            constraint_vocab: OnceLock::new(),
        })
    }

    /// The tokenizer of the file's vocabulary.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template: the file's `tokenizer.chat_template`, or the architecture's built-in
    /// template (Gemma's) for files that carry none; [`LlmError::NoChatTemplate`] when there is
    /// none, [`LlmError::BrokenChatTemplate`] when the file's does not parse.
    pub fn chat_template(&self) -> Result<&ChatTemplate> {
        self.chat.as_ref().map_err(|why| match why {
            NoTemplate::Absent(why) => LlmError::NoChatTemplate(why.clone()),
            NoTemplate::Broken(why) => LlmError::BrokenChatTemplate(why.clone()),
        })
    }

    /// The vocabulary as the output-constraint engine needs it, built on the first call
    /// (a trie of every token's bytes).
    pub fn constraint_vocab(&self) -> Result<Arc<ConstraintVocab>> {
        let built = self
            .constraint_vocab
            .get_or_init(|| ConstraintVocab::new(&self.tokenizer).map(Arc::new));
        built.clone().map_err(LlmError::from)
    }

    /// The mapped file.
    pub fn file(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// The hyper-parameters.
    pub fn hparams(&self) -> &HParams {
        &self.hparams
    }

    /// The tensors by role.
    pub fn tensors(&self) -> &ModelTensors {
        &self.tensors
    }

    /// Where the weights are.
    pub fn weights(&self) -> &WeightStore {
        &self.weights
    }

    /// The device that runs the model.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// Number of parameters (elements of every weight, the tied output counted once).
    pub fn n_params(&self) -> usize {
        self.tensors.all().iter().map(|t| t.info.nelements()).sum()
    }

    /// Bytes of every weight (the tied output counted once).
    pub fn weight_bytes(&self) -> usize {
        self.tensors.all().iter().map(|t| t.info.size).sum()
    }
}

/// The chat template of `file` (see [`Model::chat_template`]), or why there is none.
fn chat_template(
    file: &GgufFile,
    hp: &HParams,
    tok: &Tokenizer,
) -> std::result::Result<ChatTemplate, NoTemplate> {
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let (bos, eos) = (text(tok.bos()), text(tok.eos()));
    match file.opt_str("tokenizer.chat_template") {
        Ok(Some(src)) => ChatTemplate::new(src, &bos, &eos).map_err(|e| {
            log::warn!("the file's chat template does not parse: {e}");
            NoTemplate::Broken(format!("tokenizer.chat_template does not parse: {e}"))
        }),
        Ok(None) => hp
            .arch
            .imp()
            .builtin_chat_template()
            .ok_or_else(|| NoTemplate::Absent("the file has no tokenizer.chat_template".into())),
        Err(e) => Err(NoTemplate::Broken(format!("tokenizer.chat_template: {e}"))),
    }
}

"""Tiny random VibeVoice checkpoints with the real structure, for tests and for trying voxcast anywhere.

No machine of ours reaches a model hub, so tests build their own checkpoints: the same modules and file
layout as `vibevoice/VibeVoice-1.5B-hf` (or the original `microsoft/VibeVoice-1.5B`), with small sizes and
a byte-level BPE tokenizer trained on the spot. Shaped after a published member (`models.family`: VibeVoice-1.5B,
VibeVoice-Large), a tiny checkpoint keeps what sets that member apart at any size: its vocabulary, its context, its
query heads per K/V head and whether its head is tied to the embeddings. They load through exactly the code a
user's checkpoint takes. The acoustic tokenizer keeps its real 3200x downsampling, so 7.5 frames per second of
24 kHz audio hold here too.

The language model is nudged to keep speaking: one hidden dimension carries a constant offset (from the
token embeddings and the connectors' output bias) and the LM head reads the audio-diffusion token from it.
A purely random LM would often end a segment at its first step, leaving nothing to test; with the nudge a
segment runs to its frame budget, so lengths are predictable. Everything else is random: the audio is noise.

With `attentive=True` the weights are scaled so that attention matters (`_make_attention_matter`): at the default
initialisation every token looks alike to the attention (the offset dominates each norm) and the diffusion head
barely reads its condition, so hiding one key moves a latent by less than 1e-6, under the parity tolerance, and a
wrong attention mask passes a parity test. The parity tests run on the attentive checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch.overrides import TorchFunctionMode
from transformers import (
    PreTrainedTokenizerFast,
    VibeVoiceAcousticTokenizerFeatureExtractor,
    VibeVoiceConfig,
    VibeVoiceForConditionalGeneration,
    VibeVoiceProcessor,
)

from models.checkpoint_layout import original_config_from_hf, to_original_state_dict
from models.family import SIZES, VIBEVOICE_1_5B, FamilyMember
from models.loading import quiet_transformers

quiet_transformers()  # writing a checkpoint (save_pretrained) shows progress bars too

if TYPE_CHECKING:
    from models.loading import LoadedModel

Layout = Literal["hf", "original"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
VOCAB_SIZE = 3072
CONTEXT = 65_536  # VibeVoice-1.5B's `max_position_embeddings`
TINY_HEAD_DIM = 8  # a member-shaped tiny LM: two K/V heads of this size, and its member's query heads per K/V head
SPEAKING_OFFSET = 8.0
# The attentive checkpoint (`_make_attention_matter`): the spread of the token embeddings beside the offset, the
# gain on the attention's query and key weights, and the spread (times 1/sqrt(fan in)) of its value and output
# weights and of the diffusion head's condition path.
ATTENTIVE_EMBEDDING_STD = 0.3
ATTENTIVE_QUERY_KEY_GAIN = 2.0
ATTENTIVE_WEIGHT_GAIN = 1.0

# What the tiny tokenizer learns from besides the prompt's own words: about 1,200 common English words, so it
# spends about one token per 2.7 characters of a script (Qwen2's reads about 4): a script takes roughly the
# share of the context on the tiny model that it takes on the real one, and long-form limits show at tiny sizes.
_COMMON_WORDS = """
the of and to a in is it you that he was for on are with as I his they be at one have this from or had by not word
but what some we can out other were all there when up use your how said an each she which do their time if will way
about many then them write would like so these her long make thing see him two has look more day could go come did
number sound no most people my over know water than call first who may down side been now find any new work part
take get place made live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before move right boy old
too same tell does set three want air well also play small end put home read hand port large spell add even land
here must big high such follow act why ask men change went light kind off need house picture try us again animal
point mother world near build self earth father head stand own page should country found answer school grow study
still learn plant cover food sun four between state keep eye never last let thought city tree cross farm hard start
might story saw far sea draw left late run don't while press close night real life few north open seem together next
white children begin got walk example ease paper group always music those both mark often letter until mile river
car feet care second book carry took science eat room friend began idea fish mountain stop once base hear horse cut
sure watch color face wood main enough plain girl usual young ready above ever red list though feel talk bird soon
body dog family direct pose leave song measure door product black short numeral class wind question happen complete
ship area half rock order fire south problem piece told knew pass since top whole king space heard best hour better
true during hundred five remember step early hold west ground interest reach fast verb sing listen six table travel
less morning ten simple several vowel toward war lay against pattern slow center love person money serve appear road
map rain rule govern pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait
plan figure star box noun field rest correct able pound done beauty drive stood contain front teach week final gave
green oh quick develop ocean warm free minute strong special mind behind clear tail produce fact street inch
multiply nothing course stay wheel full force blue object decide surface deep moon island foot system busy test
record boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate hot miss
brought heat snow tire bring yes distant fill east paint language among welcome podcast episode today technology
news guest host thanks thank joining glad really interesting actually absolutely going okay yeah listeners audience
month million billion percent dollars euros pounds twenty thirty forty fifty sixty seventy eighty ninety zero seven
eight nine eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen third fourth fifth january
february march april june july august september october november december monday tuesday wednesday thursday friday
saturday sunday research company companies market launch release model models data artificial intelligence computer
software hardware internet online digital phone apps app users user privacy security government policy economy
economic climate energy health medical doctor scientists studies because however although therefore basically
literally probably definitely certainly exactly maybe perhaps quite rather pretty something anything everything
someone anyone everyone somebody important different difference without within around another whether whose whom
they're we're you're it's that's let's i'm i've i'd you've we've can't won't didn't doesn't isn't aren't wasn't
weren't couldn't shouldn't wouldn't haven't hasn't least already yet speaker speakers speech voices audio sounds
songs listening talking conversation discussion interview segment break coming previous later earlier evening
tonight tomorrow yesterday minutes hours seconds moment moments points issue issues problems solution solutions
examples experience experiences community communities history future present past countries cities human humans
lives friends team teams games accept according account across action activity address administration admit adult
affect age agency agent agree agreement ahead allow almost alone along american amount analysis apply approach argue
arm arrive article artist assume attack attention attorney available avoid away baby bad bag ball bank bar beat
beautiful become bed behavior believe benefit beyond bill bit blood board born budget building business buy camera
campaign cancer candidate capital card career case catch central century chair challenge chance character charge
choice choose church citizen civil claim clearly coach collection college commercial compare concern condition
conference congress consider consumer continue control cost couple court create crime cultural culture cup current
customer danger daughter dead deal death debate decade decision defense degree democrat democratic describe design
despite detail determine development die diet difficult dinner director discover discuss disease dream drop drug
edge education effect effort either election else employee enjoy enter entire environment environmental especially
establish event everybody evidence executive exist expect expert explain factor fail fear federal feeling fight film
finally financial finger finish firm floor focus foreign forget former forward fund garden gas general generation
glass goal growth guess gun guy hair hang happy heart heavy herself himself hit hope hospital hotel huge husband
identify image imagine impact improve include including increase indeed indicate individual industry information
inside instead institution international investment involve itself job join key kid kill kitchen knowledge lawyer
leader legal level lie likely local loss lot majority manage management manager marriage material matter media meet
meeting member memory mention message method middle military mission modern movement movie myself national natural
nature nearly necessary network newspaper nice none nor occur offer office officer official oil operation
opportunity option organization others outside owner painting parent particular particularly partner party patient
pay peace perform performance period physical pick pressure price private process production professional professor
program project property protect prove provide public purpose quality quickly race radio raise range rate reality
realize reason receive recent recently recognize reduce reflect region relate relationship religious remain remove
report represent republican require resource respond response responsibility result return reveal rich rise risk
role save scene score season seat section seek sell send senior sense series serious service sex shake share shoot
shot shoulder significant similar simply sister site situation size skill social society soldier sometimes son sort
source speak specific spend sport staff stage standard statement station stock strategy structure student stuff
style subject success successful suddenly suffer suggest summer support suppose task tax teacher television tend
term theory thus total tough trade traditional training treat treatment trial trip trouble truth type understand
upon value various victim view violence visit wall wear weapon weight whatever wide wife win window wish woman
worker worry writer wrong yourself
"""

_TRAINING_TEXT = """
Transform the text provided by various speakers into speech output, utilizing the distinct voice of each
respective speaker. Voice input: Speaker 0: Speaker 1: Speaker 2: Speaker 3: Text input: Speech output:
Welcome to the show. Today we talk about technology, science, music and the news of the week.
Hello and thank you for joining us. It's great to be here. What do you think about that?
The quick brown fox jumps over the lazy dog. 0123456789 , . ! ? ' " - ( ) : ;
"""


def tiny_config(member: FamilyMember | None = None) -> VibeVoiceConfig:
    """A VibeVoice config with the real component structure at toy sizes; shaped after `member` when given: its
    vocabulary, context, tying and query heads per K/V head (two K/V heads of `TINY_HEAD_DIM`)."""
    tokenizer_sizes = {
        "num_filters": 4,
        # Uneven, like the published "3-3-3-3-3-3-8" (the decoder takes them reversed): an ordering mistake in the
        # original layout's mapping then shows as missing and unexpected weights.
        "depths": [1, 1, 1, 1, 1, 1, 2],
        "downsampling_ratios": [2, 2, 4, 5, 5, 8],
        "kernel_size": 7,
    }
    text_config = {
        "model_type": "qwen2",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": CONTEXT,
        "tie_word_embeddings": True,  # as VibeVoice-1.5B's: the LM head reads the token embeddings
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    }
    if member is not None:
        heads = 2 * member.queries_per_key_value_head
        text_config |= {
            "vocab_size": member.vocab_size,
            "hidden_size": heads * TINY_HEAD_DIM,
            "intermediate_size": 2 * heads * TINY_HEAD_DIM,
            "num_attention_heads": heads,
            "num_key_value_heads": 2,
            "max_position_embeddings": member.max_position_embeddings,
            "tie_word_embeddings": member.tie_word_embeddings,
        }
    return VibeVoiceConfig(
        text_config=text_config,
        audio_config={"model_type": "vibevoice_acoustic_tokenizer", "hidden_size": 8, **tokenizer_sizes},
        semantic_model_config={
            "model_type": "vibevoice_acoustic_tokenizer_encoder",
            "hidden_size": 16,
            **tokenizer_sizes,
        },
        diffusion_head_config={"num_hidden_layers": 1, "intermediate_size": 48},
    )


def published_config(member: FamilyMember) -> VibeVoiceConfig:
    """A published member's shapes: its Qwen2.5 LM (`models.family`; VibeVoice-1.5B: hidden 1536, 28 layers, 12 query
    and 2 K/V heads of 128, a 151,936-token vocabulary tied to the head, 64K positions; VibeVoice-Large: hidden 3584,
    28 layers, 28 query and 4 K/V heads of 128, 152,064 tokens and an untied head, 32K positions), the tokenizers and
    diffusion head at transformers' defaults (which are the published ones, the head as wide as the LM).
    `VibeVoiceConfig()` alone is neither: its LM defaults to Qwen2's 7B shapes with 151,936 tokens."""
    return VibeVoiceConfig(text_config=member.text_config())


def train_tiny_tokenizer(context: int = CONTEXT) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with the special tokens VibeVoice's processor looks up by name, for a model of
    `context` positions."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    words = _COMMON_WORDS.split()
    phrases = [" ".join(words[start : start + 12]) for start in range(0, len(words), 12)]
    sentences = [" ".join(words[start : start + 9]).capitalize() + "." for start in range(0, len(words), 9)]
    tokenizer.train_from_iterator([*_TRAINING_TEXT.split("\n"), *phrases, *sentences], trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=context,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    config: VibeVoiceConfig | None = None,
    *,
    attentive: bool = False,
    dtype: torch.dtype = torch.float32,
) -> VibeVoiceForConditionalGeneration:
    """Random weights (seeded) with special token ids taken from `tokenizer`, nudged to keep speaking.

    `config` defaults to the tiny sizes; benchmarks pass a published member's config (speed does not depend on
    the weights' values) and build it under a `torch.device` context to allocate it on the GPU directly.
    The weights are made in `dtype` from the start, as `from_pretrained` loads them: the 1.5B shapes in float32
    first, then cast, would need three times the memory of the bf16 model on the way.
    `attentive` scales the weights so that every key the LM attends to moves its output (`_make_attention_matter`).
    """
    config = config or tiny_config()
    ids = {token: _token_id(tokenizer, token) for token in SPECIAL_TOKENS}
    config.pad_token_id = config.eos_token_id = ids["<|endoftext|>"]
    config.audio_bos_token_id = ids["<|vision_start|>"]
    config.audio_eos_token_id = ids["<|vision_end|>"]
    config.audio_token_id = ids["<|vision_pad|>"]
    text: Any = config.text_config  # typed `dict | PreTrainedConfig | None` by transformers; built here
    text.pad_token_id = text.eos_token_id = config.eos_token_id
    torch.manual_seed(seed)
    with _DrawnInFloat32():
        model = VibeVoiceForConditionalGeneration._from_config(config, dtype=dtype).eval()
    _make_tokenizers_sensitive(model)
    if attentive:
        _make_attention_matter(model, torch.Generator().manual_seed(seed + 1))
    _nudge_towards_speaking(model)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model


class _DrawnInFloat32(TorchFunctionMode):
    """`torch.nn.init`'s random fills of bf16 or fp16 tensors on the CPU, drawn into a float32 tensor of the same
    shape (fan-in rules read the shape) and rounded: the same distributions. The CPU draws low-precision normals four
    times slower than float32 ones, and the 1.5B shapes' initialisation (every weight filled twice, by torch's layer
    defaults, then transformers') took two minutes in bf16. Other devices and dtypes draw as they would anyway.

    Matched by name and module: while it builds a model, transformers swaps its guarded versions (which leave a
    tensor marked `_is_hf_initialized` as it is) into `torch.nn.init`, and those are what a mode is handed."""

    _MODULES = frozenset(("torch.nn.init", "transformers.initialization"))
    _FILLS = frozenset(
        ("normal_", "uniform_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
         "xavier_normal_", "orthogonal_")
    )  # fmt: skip

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tensor = args[0] if args else kwargs.get("tensor")
        is_fill = getattr(func, "__module__", None) in self._MODULES and func.__name__ in self._FILLS
        if not (is_fill and isinstance(tensor, torch.Tensor) and self._drawn_slowly(tensor)):
            return func(*args, **kwargs)
        drawn = torch.empty(tensor.shape, dtype=torch.float32)
        if args:
            func(drawn, *args[1:], **kwargs)
        else:
            func(**{**kwargs, "tensor": drawn})
        with torch.no_grad():
            tensor.copy_(drawn)
        return tensor

    @staticmethod
    def _drawn_slowly(tensor: torch.Tensor) -> bool:
        return (
            tensor.dtype in (torch.bfloat16, torch.float16)
            and tensor.device.type == "cpu"
            and not getattr(tensor, "_is_hf_initialized", False)  # a guarded fill leaves it be: so does this
        )


@torch.no_grad()
def _make_tokenizers_sensitive(model: VibeVoiceForConditionalGeneration) -> None:
    """Variance-preserving weights in the acoustic and semantic tokenizers.

    The default initialisation (std 0.02, layer scales of 1e-6) shrinks the signal at every one of the
    seven stages, so a random decoder's audio barely depends on its latents. Tests compare audio to prove
    latents equal; that needs audio that moves when the latents move.
    """
    inner = model.model
    for tower in (inner.audio_tower, inner.semantic_tokenizer_encoder):
        for name, parameter in tower.named_parameters():
            if name.endswith("gamma"):
                parameter.fill_(0.5)
            elif parameter.dim() > 1:
                fan_in = parameter[0].numel() if "convtr" not in name else parameter.shape[0] * parameter.shape[2]
                parameter.normal_(0.0, fan_in**-0.5)


@torch.no_grad()
def _make_attention_matter(model: VibeVoiceForConditionalGeneration, generator: torch.Generator) -> None:
    """Scale the weights so that each key the LM attends to, and so each K/V entry, moves the latents.

    Three things hide attention at the default initialisation: the token embeddings (std 0.02) vanish beside the
    speaking offset in every norm, so all tokens look alike; value and output weights of std 0.02 shrink what
    attention adds to the residual; and the diffusion head's condition path (std 0.02 twice over) barely reads
    the hidden state. Here the embeddings spread beside the offset, queries and keys are sharpened, and values,
    outputs, the head's condition projection, adaptive-norm modulations and output layer get variance-preserving
    weights (attention never writes the offset's dimension, so the nudge to keep speaking holds). Hiding one of a
    dozen keys then moves a latent by about 1e-2.
    """
    inner = model.model
    embeddings = inner.language_model.embed_tokens.weight
    # Drawn on the CPU (the generator's device) and copied, whatever device and dtype the model is built in.
    embeddings[:, 1:].copy_(
        ATTENTIVE_EMBEDDING_STD * torch.randn(embeddings[:, 1:].shape, generator=generator, device="cpu")
    )
    for layer in inner.language_model.layers:
        attention = layer.self_attn
        attention.q_proj.weight.mul_(ATTENTIVE_QUERY_KEY_GAIN)
        attention.k_proj.weight.mul_(ATTENTIVE_QUERY_KEY_GAIN)
        for linear in (attention.v_proj, attention.o_proj):
            _variance_preserving(linear.weight, generator)
        attention.o_proj.weight[0] = 0.0
    for name, parameter in inner.diffusion_head.named_parameters():
        if name.startswith("cond_proj") or ".linear" in name:  # the condition's projection, modulations, output
            _variance_preserving(parameter, generator)


def _variance_preserving(weight: torch.Tensor, generator: torch.Generator) -> None:
    noise = torch.randn(weight.shape, generator=generator, device="cpu")
    weight.copy_(ATTENTIVE_WEIGHT_GAIN * weight.shape[1] ** -0.5 * noise)


@torch.no_grad()
def _nudge_towards_speaking(model: VibeVoiceForConditionalGeneration) -> None:
    """Dimension 0 of every hidden state carries an offset; the audio-diffusion token's head row reads it most.

    With tied embeddings the head's rows are the embeddings, whose dimension 0 is the offset itself, so the
    audio token's row gets one more than the largest; an untied head gets the same rule.
    """
    config = model.config
    inner = model.model
    inner.language_model.embed_tokens.weight[:, 0] = SPEAKING_OFFSET
    inner.multi_modal_projector.linear_2.bias[0] = SPEAKING_OFFSET
    inner.semantic_connector.linear_2.bias[0] = SPEAKING_OFFSET
    head = model.get_output_embeddings().weight
    head[config.audio_token_id, 0] = head[:, 0].max() + 1.0


def random_model(size: str, device: torch.device, dtype: torch.dtype, *, attentive: bool = False) -> LoadedModel:
    """A random model in memory, tiny (`"tiny"`) or at a published member's shapes (`"1.5b"`: VibeVoice-1.5B, `"7b"`:
    VibeVoice-Large), built in place on the device in `dtype`, with the tiny tokenizer: what benchmarks and the GPU
    checks run (speed does not depend on the weights' values). `attentive`: see `build_tiny_model`."""
    from models.loading import LoadedModel, leave_levelling_to_the_voice_prompt

    config = _config_of_size(size)
    tokenizer = train_tiny_tokenizer(_context(config))
    with torch.device(device):
        model = build_tiny_model(tokenizer, seed=0, config=config, attentive=attentive, dtype=dtype)
    processor = VibeVoiceProcessor(VibeVoiceAcousticTokenizerFeatureExtractor(), tokenizer)
    leave_levelling_to_the_voice_prompt(processor)
    return LoadedModel(model, processor, f"random-{size}", "hf", device, dtype)


def random_model_bytes(size: str, dtype: torch.dtype) -> int:
    """Memory `random_model(size, ..., dtype)` takes while it builds: the weights in `dtype`, plus a float32 copy of
    the largest (what a low-precision weight is drawn into on the CPU, `_DrawnInFloat32`). Counted on the meta
    device, so asking costs no memory: what lets a benchmark refuse a device without room before filling it."""
    with torch.device("meta"):
        model = VibeVoiceForConditionalGeneration(_config_of_size(size))
    counts = [parameter.numel() for parameter in model.parameters()]
    return sum(counts) * dtype.itemsize + max(counts) * torch.float32.itemsize


def _context(config: VibeVoiceConfig) -> int:
    """The language model's context (its `text_config`, which transformers types loosely)."""
    text: Any = config.text_config
    return int(text.max_position_embeddings)


def _token_id(tokenizer: Any, token: str) -> int:
    """One special token's id (the tokenizer's lookup also takes and returns lists)."""
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int):
        raise TypeError(f"the tokenizer has no single id for {token!r}: {found!r}")
    return found


def _config_of_size(size: str) -> VibeVoiceConfig:
    if size != "tiny" and size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; use tiny, {' or '.join(SIZES)}")
    return published_config(SIZES[size]) if size in SIZES else tiny_config()


def write_tiny_checkpoint(
    directory: str | Path,
    layout: Layout = "hf",
    seed: int = 0,
    *,
    attentive: bool = False,
    member: FamilyMember | None = None,
) -> Path:
    """Write a tiny random checkpoint to `directory` in the given layout and return the folder (`attentive`: see
    `_make_attention_matter`; `member`: shaped after a published member, see `tiny_config`).

    `hf` is the transformers layout (`save_pretrained` of model and processor). `original` mimics
    `microsoft/VibeVoice-1.5B`: a `model_type: vibevoice` config with `acoustic_tokenizer_config`,
    `decoder_config` and friends, weights named `model.acoustic_tokenizer.*`, `model.prediction_head.*`,
    `model.acoustic_connector.*`, stored as the published one is (bf16, sharded with an index, the head tied
    to the embeddings and not stored, the decoder config in its older spelling), and a `preprocessor_config.json`
    as the original processor wrote it, naming the member's Qwen tokenizer (`Qwen/Qwen2.5-1.5B` unless shaped after
    another; the tiny one lies beside the config under that name). An untied head (VibeVoice-Large's) is stored.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = tiny_config(member)
    tokenizer = train_tiny_tokenizer(_context(config))
    model = build_tiny_model(tokenizer, seed=seed, config=config, attentive=attentive)
    feature_extractor = VibeVoiceAcousticTokenizerFeatureExtractor()
    if layout == "hf":
        model.save_pretrained(directory)
        processor = VibeVoiceProcessor(feature_extractor, tokenizer)
        processor.save_pretrained(directory)
    elif layout == "original":
        _write_original_layout(directory, model, tokenizer, (member or VIBEVOICE_1_5B).qwen_tokenizer)
    else:
        raise ValueError(f"unknown checkpoint layout {layout!r}; use 'hf' or 'original'")
    return directory


def _write_original_layout(
    directory: Path, model: VibeVoiceForConditionalGeneration, tokenizer: PreTrainedTokenizerFast, tokenizer_name: str
) -> None:
    _write_sharded_bf16(directory, to_original_state_dict(_without_tied_weights(model)))
    (directory / "config.json").write_text(json.dumps(original_config_from_hf(model.config), indent=2))
    (directory / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "processor_class": "VibeVoiceProcessor",
                "speech_tok_compress_ratio": 3200,
                "db_normalize": True,
                "audio_processor": {
                    "feature_extractor_type": "VibeVoiceTokenizerProcessor",
                    "sampling_rate": 24000,
                    "normalize_audio": True,
                    "target_dB_FS": -25,
                    "eps": 1e-06,
                },
                "language_model_pretrained_name": tokenizer_name,
            },
            indent=2,
        )
    )
    # The published checkpoints ship no tokenizer: the processor config names Qwen's, which a user's hub cache
    # holds. The tiny one's sits beside the config under that name, where the loader also looks.
    tokenizer.save_pretrained(directory / tokenizer_name)


def _without_tied_weights(model: VibeVoiceForConditionalGeneration) -> dict[str, torch.Tensor]:
    """The state dict as `save_pretrained` stores it: a head tied to the embeddings is not stored twice."""
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    return state


def _write_sharded_bf16(directory: Path, state_dict: dict[str, torch.Tensor]) -> None:
    """bf16 weights in several shards and their `model.safetensors.index.json`, as the published 1.5B stores them."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    weights = {key: value.to(torch.bfloat16).contiguous() for key, value in state_dict.items()}
    total = sum(value.numel() * value.element_size() for value in weights.values())
    split = split_torch_state_dict_into_shards(weights, max_shard_size=total // 3 + 1)
    for filename, keys in split.filename_to_tensors.items():
        save_file({key: weights[key] for key in keys}, directory / filename, metadata={"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": split.tensor_to_filename}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

"""Hugging Face transformers families at small random configurations, built in code (no
weights or configuration files are downloaded), for the zoo (tools/zoo.py). Each function
returns an nn.Module of one input whose forward gives one tensor: the logits (language and
classification heads) or the projected embeddings (CLIP's towers), so that the exporter's
cross-entropy over the last dimension applies to every family.

Sizes: 2 layers (1 for the encoder-decoders' each side), width 32, 4 heads, a vocabulary
of 64; the zoo's inputs are 2 x 8 tokens below 64, 2 x 3 x 32 x 32 images, 2 x 16 x 16
log-mel frames (Whisper) and 2 x 400 audio samples (wav2vec2).
"""

import torch
import transformers as tf

VOCAB, WIDTH, HEADS, FFN = 64, 32, 4, 64


class Head(torch.nn.Module):
    """`model(x, **extra)`'s field `field`: one tensor from a transformers ModelOutput."""

    def __init__(self, model, field="logits", **extra):
        super().__init__()
        self.model = model
        self.field = field
        self.extra = extra

    def forward(self, x):
        return getattr(self.model(x, **self.extra), self.field)


class Seq2Seq(torch.nn.Module):
    """An encoder-decoder's logits with the decoder fed a fixed prefix of `length` tokens (a
    buffer, so the graph's one input is the encoder's)."""

    def __init__(self, model, length=8, input_name="input_ids"):
        super().__init__()
        self.model = model
        self.input_name = input_name
        g = torch.Generator().manual_seed(1)
        self.register_buffer("decoder_input_ids", torch.randint(1, VOCAB, (2, length), generator=g),
                             persistent=False)

    def forward(self, x):
        return self.model(**{self.input_name: x},
                          decoder_input_ids=self.decoder_input_ids).logits


def _decoder(config_class, model_class, **extra):
    config = config_class(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                          num_hidden_layers=2, num_attention_heads=HEADS,
                          max_position_embeddings=64, use_cache=False,
                          attn_implementation="eager", **extra)
    return Head(model_class(config))


def gpt2():
    config = tf.GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS,
                           n_positions=64, use_cache=False, attn_implementation="eager")
    return Head(tf.GPT2LMHeadModel(config))


def llama():
    return _decoder(tf.LlamaConfig, tf.LlamaForCausalLM, num_key_value_heads=2)


def mistral():
    return _decoder(tf.MistralConfig, tf.MistralForCausalLM, num_key_value_heads=2,
                    sliding_window=4)


def qwen2():
    return _decoder(tf.Qwen2Config, tf.Qwen2ForCausalLM, num_key_value_heads=2)


def gemma():
    return _decoder(tf.GemmaConfig, tf.GemmaForCausalLM, num_key_value_heads=1, head_dim=8)


def phi3():
    return _decoder(tf.Phi3Config, tf.Phi3ForCausalLM, num_key_value_heads=2,
                    pad_token_id=0)


def _encoder(config_class, model_class, **extra):
    config = config_class(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                          num_hidden_layers=2, num_attention_heads=HEADS,
                          max_position_embeddings=64, attn_implementation="eager", **extra)
    return Head(model_class(config))


def bert():
    return _encoder(tf.BertConfig, tf.BertForMaskedLM)


def roberta():
    return _encoder(tf.RobertaConfig, tf.RobertaForMaskedLM, pad_token_id=1)


def albert():
    return _encoder(tf.AlbertConfig, tf.AlbertForMaskedLM, embedding_size=16)


def distilbert():
    config = tf.DistilBertConfig(vocab_size=VOCAB, dim=WIDTH, hidden_dim=FFN, n_layers=2,
                                 n_heads=HEADS, max_position_embeddings=64,
                                 attn_implementation="eager")
    return Head(tf.DistilBertForMaskedLM(config))


def t5():
    config = tf.T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=FFN, num_layers=1,
                         num_decoder_layers=1, num_heads=HEADS, use_cache=False,
                         decoder_start_token_id=0, attn_implementation="eager")
    return Seq2Seq(tf.T5ForConditionalGeneration(config))


def _seq2seq(config_class, model_class):
    config = config_class(vocab_size=VOCAB, d_model=WIDTH, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                          encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64,
                          use_cache=False, attn_implementation="eager")
    return Seq2Seq(model_class(config))


def bart():
    return _seq2seq(tf.BartConfig, tf.BartForConditionalGeneration)


def whisper():
    config = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=WIDTH,
                              encoder_layers=1, decoder_layers=1, encoder_attention_heads=HEADS,
                              decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
                              decoder_ffn_dim=FFN, max_source_positions=8,
                              max_target_positions=16, use_cache=False, pad_token_id=1,
                              bos_token_id=2, eos_token_id=3, decoder_start_token_id=2,
                              attn_implementation="eager")
    return Seq2Seq(tf.WhisperForConditionalGeneration(config), input_name="input_features")


def wav2vec2():
    config = tf.Wav2Vec2Config(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=1,
                               num_attention_heads=HEADS, intermediate_size=FFN,
                               conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                               num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
                               attn_implementation="eager")
    return Head(tf.Wav2Vec2ForCTC(config))


def _image(config_class, model_class, **extra):
    return Head(model_class(config_class(num_labels=10, **extra)))


def vit():
    return _image(tf.ViTConfig, tf.ViTForImageClassification, image_size=32, patch_size=8,
                  hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS,
                  intermediate_size=FFN, attn_implementation="eager")


def swin():
    return _image(tf.SwinConfig, tf.SwinForImageClassification, image_size=32, patch_size=4,
                  embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4)


def convnext():
    return _image(tf.ConvNextConfig, tf.ConvNextForImageClassification, num_channels=3,
                  num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], patch_size=2,
                  image_size=32)


def clip_text():
    config = tf.CLIPTextConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                               num_hidden_layers=2, num_attention_heads=HEADS,
                               max_position_embeddings=16, projection_dim=16,
                               attn_implementation="eager")
    return Head(tf.CLIPTextModelWithProjection(config), field="text_embeds")


def clip_vision():
    config = tf.CLIPVisionConfig(hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=2,
                                 num_attention_heads=HEADS, image_size=32, patch_size=8,
                                 projection_dim=16, attn_implementation="eager")
    return Head(tf.CLIPVisionModelWithProjection(config), field="image_embeds")


# Families beyond the first nineteen: decoders with other attention and position schemes,
# mixture-of-experts routing, encoders and image models.
def opt():
    config = tf.OPTConfig(vocab_size=VOCAB, hidden_size=WIDTH, ffn_dim=FFN, num_hidden_layers=2,
                          num_attention_heads=HEADS, max_position_embeddings=64,
                          word_embed_proj_dim=WIDTH, use_cache=False, attn_implementation="eager")
    return Head(tf.OPTForCausalLM(config))


def gpt_neox():
    return _decoder(tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM)


def falcon():
    config = tf.FalconConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                             num_attention_heads=HEADS, use_cache=False,
                             attn_implementation="eager")
    return Head(tf.FalconForCausalLM(config))


def bloom():
    config = tf.BloomConfig(vocab_size=VOCAB, hidden_size=WIDTH, n_layer=2, n_head=HEADS,
                            use_cache=False, attn_implementation="eager")
    return Head(tf.BloomForCausalLM(config))


def mixtral():
    return _decoder(tf.MixtralConfig, tf.MixtralForCausalLM, num_key_value_heads=2,
                    num_local_experts=4, num_experts_per_tok=2)


def qwen2_moe():
    return _decoder(tf.Qwen2MoeConfig, tf.Qwen2MoeForCausalLM, num_key_value_heads=2,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=32)


def gemma2():
    return _decoder(tf.Gemma2Config, tf.Gemma2ForCausalLM, num_key_value_heads=2, head_dim=8)


def olmo():
    return _decoder(tf.OlmoConfig, tf.OlmoForCausalLM)


def phi():
    return _decoder(tf.PhiConfig, tf.PhiForCausalLM)


def deberta_v2():
    return _encoder(tf.DebertaV2Config, tf.DebertaV2ForMaskedLM)


def electra():
    return _encoder(tf.ElectraConfig, tf.ElectraForMaskedLM, embedding_size=16)


def xlm_roberta():
    return _encoder(tf.XLMRobertaConfig, tf.XLMRobertaForMaskedLM, pad_token_id=1)


def mbart():
    return _seq2seq(tf.MBartConfig, tf.MBartForConditionalGeneration)


def pegasus():
    return _seq2seq(tf.PegasusConfig, tf.PegasusForConditionalGeneration)


def beit():
    return _image(tf.BeitConfig, tf.BeitForImageClassification, image_size=32, patch_size=8,
                  hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS,
                  intermediate_size=FFN, use_relative_position_bias=True)


def dinov2():
    return _image(tf.Dinov2Config, tf.Dinov2ForImageClassification, image_size=32, patch_size=8,
                  hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, mlp_ratio=2)


def segformer():
    return _image(tf.SegformerConfig, tf.SegformerForImageClassification, num_encoder_blocks=2,
                  depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                  num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                  decoder_hidden_size=32)


def qwen3():
    return _decoder(tf.Qwen3Config, tf.Qwen3ForCausalLM, num_key_value_heads=2, head_dim=8)


def qwen3_moe():
    return _decoder(tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM, num_key_value_heads=2, head_dim=8,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def olmoe():
    return _decoder(tf.OlmoeConfig, tf.OlmoeForCausalLM, num_key_value_heads=2, num_experts=4,
                    num_experts_per_tok=2)


def starcoder2():
    return _decoder(tf.Starcoder2Config, tf.Starcoder2ForCausalLM, num_key_value_heads=2)


def gpt_bigcode():
    config = tf.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS,
                                 n_positions=64, use_cache=False, attn_implementation="eager")
    return Head(tf.GPTBigCodeForCausalLM(config))


def cohere():
    return _decoder(tf.CohereConfig, tf.CohereForCausalLM, num_key_value_heads=2)


def granite():
    return _decoder(tf.GraniteConfig, tf.GraniteForCausalLM, num_key_value_heads=2)


def olmo2():
    return _decoder(tf.Olmo2Config, tf.Olmo2ForCausalLM, num_key_value_heads=2)


def nemotron():
    return _decoder(tf.NemotronConfig, tf.NemotronForCausalLM, num_key_value_heads=2)


def mamba():
    config = tf.MambaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                            state_size=4, use_cache=False)
    return Head(tf.MambaForCausalLM(config))


def mamba2():
    config = tf.Mamba2Config(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                             state_size=4, num_heads=4, head_dim=16, n_groups=1, expand=2,
                             chunk_size=4, use_cache=False)
    return Head(tf.Mamba2ForCausalLM(config))


def jamba():
    return _decoder(tf.JambaConfig, tf.JambaForCausalLM, num_key_value_heads=2, num_experts=4,
                    num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1,
                    expert_layer_period=2, expert_layer_offset=1, mamba_d_state=4,
                    mamba_d_conv=4, mamba_expand=2, use_mamba_kernels=False)


def modernbert():
    config = tf.ModernBertConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                                 num_hidden_layers=2, num_attention_heads=HEADS,
                                 max_position_embeddings=64, attn_implementation="eager",
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                 cls_token_id=1, sep_token_id=2)
    return Head(tf.ModernBertForMaskedLM(config))


def siglip_vision():
    config = tf.SiglipVisionConfig(hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=2,
                                   num_attention_heads=HEADS, image_size=32, patch_size=8)
    return Head(tf.SiglipVisionModel(config), field="pooler_output")


def convnextv2():
    return _image(tf.ConvNextV2Config, tf.ConvNextV2ForImageClassification, num_stages=2,
                  hidden_sizes=[8, 16], depths=[1, 1], patch_size=2, image_size=32)


def swinv2():
    return _image(tf.Swinv2Config, tf.Swinv2ForImageClassification, image_size=32, patch_size=4,
                  embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4)


def _audio(config_class, model_class, **extra):
    config = config_class(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=1,
                          num_attention_heads=HEADS, intermediate_size=FFN, conv_dim=(16, 16),
                          conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                          num_conv_pos_embedding_groups=2, **extra)
    return Head(model_class(config))


def hubert():
    return _audio(tf.HubertConfig, tf.HubertForCTC, attn_implementation="eager")


def wavlm():
    return _audio(tf.WavLMConfig, tf.WavLMForCTC, num_buckets=8, max_bucket_distance=16)


def videomae():
    return _image(tf.VideoMAEConfig, tf.VideoMAEForVideoClassification, image_size=32,
                  patch_size=8, num_frames=4, tubelet_size=2, hidden_size=WIDTH,
                  num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=FFN)

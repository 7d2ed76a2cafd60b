"""Trains Loom's demo model kit end to end: tokenizer, base model, LoRA adapters, Medusa heads,
evaluation, export. Every stage checkpoints under --work and is skipped or resumed when its
checkpoint is there, so an interrupted run picks up where it stopped. Deterministic for a given
--threads (seeds fixed; data order is a function of the step number).

    /usr/bin/python3 tools/demo-model/train.py --preset full    # models/demo/
    /usr/bin/python3 tools/demo-model/train.py --preset tiny --out /tmp/demo --work /tmp/demo-work
"""
import argparse
import json
import math
import os
import random
import time
from collections import OrderedDict

import torch
import torch.nn.functional as F

import corpora
import safetensors_io
from bpe import Tokenizer, chat, train_merges
from llama import PROJECTIONS, LlamaConfig, LlamaForCausalLM, Lora, MedusaHeads

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))

PRESETS = {
    # ~2 minutes: proves every artifact is produced and loads; the model says little of use.
    'tiny': dict(base_steps=30, lora_steps=15, medusa_steps=10, medusa_seqs=24, batch=8, seq=128,
                 eval_windows=4, medusa_eval_seqs=8, gen_tokens=64, adapter_medusa_steps=10, adapter_medusa_seqs=16),
    # Sized for a shared 2-core machine (see README's Results for the stages' wall times).
    'full': dict(base_steps=600, lora_steps=160, medusa_steps=2400, medusa_seqs=2048, batch=12, seq=128,
                 eval_windows=16, medusa_eval_seqs=16, gen_tokens=96, adapter_medusa_steps=400,
                 adapter_medusa_seqs=1024),
}
VOCAB_SIZE = 2048
MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-5)
ADAPTERS = {
    # name: (corpus, what it sounds like)
    'kjv': ('kjv', 'the King James Bible (1611)'),
    'devil': ('devil', "Ambrose Bierce's The Devil's Dictionary (1911)"),
}
LORA_RANK, LORA_ALPHA = 8, 16
MEDUSA_HEADS = 4
CORPORA = ['shakespeare', 'kjv', 'devil']
SEED = 1234


def log(*a):
    print(time.strftime('%H:%M:%S'), *a, flush=True)


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def lm_loss(model, x):
    """Mean next-token loss of `x` `[b, t+1]` (targets of -100 are ignored)."""
    inp = x[:, :-1].clamp(min=0)
    logits = model(inp)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), ignore_index=-100)


def atomic_save(obj, path):
    torch.save(obj, path + '.tmp')
    os.replace(path + '.tmp', path)


def train_loop(name, params, model, corpus, steps, lr, warmup, p, chat_fraction, ckpt, seed, extra_state):
    """AdamW over `params`, checkpointing every 25 steps into `ckpt` (resumed if present)."""
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': no_decay, 'weight_decay': 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    start = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        extra_state['load'](st['weights'])
        opt.load_state_dict(st['opt'])
        start = st['step']
        log(f'{name}: resuming at step {start}')
    t0, seen = time.time(), 0
    for step in range(start, steps):
        rng = random.Random(seed * 1_000_003 + step)
        x = corpora.batch(corpus, rng, p['batch'], p['seq'], chat_fraction)
        for g in opt.param_groups:
            g['lr'] = lr_at(step, steps, lr, warmup)
        loss = lm_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        seen += x.numel()
        if step % 10 == 0 or step == steps - 1:
            dt = time.time() - t0
            log(f'{name}: step {step + 1}/{steps} loss {loss.item():.3f} lr {opt.param_groups[0]["lr"]:.2e} '
                f'{seen / max(dt, 1e-9):.0f} tok/s')
        if (step + 1) % 25 == 0 or step == steps - 1:
            atomic_save({'weights': extra_state['save'](), 'opt': opt.state_dict(), 'step': step + 1}, ckpt)


def record_time(work, stage, seconds):
    """Add a stage's wall time to work/timings.json (kept across resumed runs)."""
    path = os.path.join(work, 'timings.json')
    t = json.load(open(path)) if os.path.exists(path) else {}
    t[stage] = round(t.get(stage, 0) + seconds)
    with open(path, 'w') as f:
        json.dump(t, f, indent=2)


def tokenizer_cases(tok, corp):
    """Snippets of every held-out text and a rendered chat, with the ids this encoder gives them:
    verify-in-loom.ts checks Loom's tokenizer gives the same."""
    rng = random.Random(SEED + 3)
    texts = []
    for kind in ('shakespeare', 'kjv', 'devil'):
        t = corpora.as_text(kind, corp[kind][1].docs)
        for _ in range(20):
            s = rng.randrange(len(t) - 400)
            texts.append(t[s:s + rng.randrange(1, 400)])
    texts.append(chat([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': "What's 2+2?"},
                       {'role': 'assistant', 'content': 'Four, my lord.'}], add_generation_prompt=True))
    texts.append("  leading spaces, _italics_, don't, we'll, tabs\tand\n\n\nnewlines  ")
    return [{'text': t, 'ids': tok.encode(t)} for t in texts]


def stage_tokenizer(work):
    path = os.path.join(work, 'merges.json')
    if not os.path.exists(path):
        log('tokenizer: training byte-level BPE')
        texts = [corpora.as_text('shakespeare', corpora.shakespeare()[0]),
                 corpora.as_text('kjv', corpora.kjv()[0]),
                 corpora.as_text('devil', corpora.devil()[0])]
        merges = train_merges(texts, VOCAB_SIZE - 256 - 5)
        with open(path + '.tmp', 'w') as f:
            json.dump(merges, f)
        os.replace(path + '.tmp', path)
    with open(path) as f:
        tok = Tokenizer(json.load(f))
    assert tok.vocab_size == VOCAB_SIZE, tok.vocab_size
    return tok


def model_config(tok):
    return LlamaConfig(vocab_size=tok.vocab_size, **MODEL)


def stage_base(work, tok, corp, p):
    final = os.path.join(work, 'base-final.pt')
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(model_config(tok))
    if os.path.exists(final):
        model.load_state_dict(torch.load(final))
        return model
    log(f'base: {sum(q.numel() for q in model.parameters()) / 1e6:.2f}M parameters')
    params = list(model.parameters())
    train_loop('base', params, model, corp['shakespeare'][0], p['base_steps'], 4e-3, min(100, p['base_steps'] // 5),
               p, 0.2, os.path.join(work, 'base.ckpt'), SEED,
               {'save': model.state_dict, 'load': model.load_state_dict})
    atomic_save(model.state_dict(), final)
    return model


def stage_lora(work, name, model, corpus, p):
    final = os.path.join(work, f'lora-{name}-final.pt')
    torch.manual_seed(SEED + len(name))
    lora = Lora(model, LORA_RANK, LORA_ALPHA, PROJECTIONS)
    if os.path.exists(final):
        lora.load_state_dict(torch.load(final))
        return lora
    for q in model.parameters():
        q.requires_grad_(False)
    lora.attach(model)
    train_loop(f'lora {name}', list(lora.parameters()), model, corpus, p['lora_steps'], 4e-3,
               min(25, p['lora_steps'] // 5), p, 0.25, os.path.join(work, f'lora-{name}.ckpt'), SEED + 17 * len(name),
               {'save': lora.state_dict, 'load': lora.load_state_dict})
    Lora.detach(model)
    atomic_save(lora.state_dict(), final)
    return lora


def greedy_prompts(corpus, count, seed, prompt_len):
    """Prompts for self-distillation: half plain text windows, half chat conversations up to an
    assistant turn, all `prompt_len` tokens long."""
    rng = random.Random(seed)
    tok = corpus.tok
    out = []
    asst = tok.encode('<|assistant|>\n')
    while len(out) < count:
        if len(out) % 2 == 0:
            out.append(corpus.window(rng, prompt_len - 1))
        else:
            (u, _), = corpora.chat_turns(corpus.kind, corpus.docs, rng)[:1]
            ids = tok.encode(chat([{'role': 'user', 'content': u}], add_generation_prompt=True))
            if len(ids) >= prompt_len or ids[-len(asst):] != asst:
                continue
            # Left-pad with running text from the corpus so every prompt has the same length.
            pad = corpus.window(rng, prompt_len - len(ids) - 1)
            out.append(torch.cat([pad, torch.tensor(ids)]))
    return torch.stack(out)


@torch.no_grad()
def self_distill(model, loras, corp_of, count, seed, new_tokens):
    """Sequences of the model's own greedy output (base and through each adapter): ids `[n, t]`,
    final hidden states `[n, t, h]`, and the index of the first generated token."""
    prompt_len = 32
    ids_all, hid_all = [], []
    for who, corpus, share in corp_of:
        n = max(2, int(count * share))
        prompts = greedy_prompts(corpus, n, seed + len(who), prompt_len)
        if who != 'base':
            loras[who].attach(model)
        for i in range(0, n, 64):
            gen = model.generate_greedy(prompts[i:i + 64], new_tokens)
            seq = torch.cat([prompts[i:i + 64], gen], dim=1)
            ids_all.append(seq)
            hid_all.append(model.hidden(seq)[0])
        Lora.detach(model)
    return torch.cat(ids_all), torch.cat(hid_all), prompt_len


def medusa_targets(ids, heads, first):
    """Head k at position t predicts token t+k+2; only positions whose target was generated count."""
    n, t = ids.shape
    tg = torch.full((n, t, heads), -100, dtype=torch.long)
    for k in range(heads):
        shift = k + 2
        tg[:, :t - shift, k] = ids[:, shift:]
        tg[:, :max(0, first - shift), k] = -100
    return tg


def train_heads(name, heads, model, ids, hid, first, steps, ckpt, seed, lr=3e-3):
    """AdamW on the heads' residual blocks (the LM head stays frozen) over self-distilled
    sequences, 16 a step, checkpointing every 25 steps into `ckpt` (resumed if present)."""
    tg = medusa_targets(ids, MEDUSA_HEADS, first)
    for q in model.parameters():
        q.requires_grad_(False)
    params = [q for n_, q in heads.named_parameters() if not n_.startswith('base_lm_head')]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    start = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        heads.load_state_dict(st['weights'])
        opt.load_state_dict(st['opt'])
        start = st['step']
    bs = 16
    for step in range(start, steps):
        g = torch.Generator().manual_seed(seed + step)
        rows = torch.randint(0, ids.shape[0], (bs,), generator=g)
        x, y = hid[rows, first - 2:], tg[rows, first - 2:]
        for grp in opt.param_groups:
            grp['lr'] = lr_at(step, steps, lr, 10)
        logits = heads(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            log(f'{name}: step {step + 1}/{steps} loss {loss.item():.3f}')
        if (step + 1) % 25 == 0 or step == steps - 1:
            atomic_save({'weights': heads.state_dict(), 'opt': opt.state_dict(), 'step': step + 1}, ckpt)


def stage_medusa(work, model, loras, corp, p):
    final = os.path.join(work, 'medusa-final.pt')
    torch.manual_seed(SEED + 99)
    heads = MedusaHeads(model.cfg, MEDUSA_HEADS, model.lm_head, own_lm_head=False)
    if os.path.exists(final):
        heads.load_state_dict(torch.load(final))
        return heads
    data_path = os.path.join(work, 'medusa-data.pt')
    if os.path.exists(data_path):
        ids, hid, first = torch.load(data_path)
    else:
        log('medusa: generating self-distillation data (greedy outputs of the frozen model)')
        sources = [('base', corp['shakespeare'][0], 0.6), ('kjv', corp['kjv'][0], 0.2), ('devil', corp['devil'][0], 0.2)]
        ids, hid, first = self_distill(model, loras, sources, p['medusa_seqs'], SEED + 5, p['gen_tokens'])
        atomic_save((ids, hid, first), data_path)
    train_heads('medusa', heads, model, ids, hid, first, p['medusa_steps'], os.path.join(work, 'medusa.ckpt'), SEED)
    atomic_save(heads.state_dict(), final)
    return heads


def stage_adapter_medusa(work, name, model, loras, base_heads, corp, p):
    """An adapter's own Medusa heads (LoRAX's Medusa+LoRA): the same self-distillation as the base
    heads, on the greedy output of the model with this adapter applied (half on prompts from the
    adapter's own text, a quarter from each other text: requests send it any prompt), starting from
    the base heads, so a short run only has to learn where the adapter's output differs."""
    final = os.path.join(work, f'medusa-{name}-final.pt')
    heads = MedusaHeads(model.cfg, MEDUSA_HEADS, model.lm_head, own_lm_head=False)
    heads.load_state_dict(base_heads.state_dict())
    if os.path.exists(final):
        heads.load_state_dict(torch.load(final))
        return heads
    data_path = os.path.join(work, f'medusa-{name}-data.pt')
    if os.path.exists(data_path):
        ids, hid, first = torch.load(data_path)
    else:
        log(f'medusa {name}: generating self-distillation data (greedy outputs with the adapter applied)')
        own = ADAPTERS[name][0]
        sources = [(name, corp[own][0], 0.5)] + [(name, corp[k][0], 0.25) for k in CORPORA if k != own]
        ids, hid, first = self_distill(model, loras, sources, p['adapter_medusa_seqs'], SEED + 7 * len(name),
                                       p['gen_tokens'])
        atomic_save((ids, hid, first), data_path)
    train_heads(f'medusa {name}', heads, model, ids, hid, first, p['adapter_medusa_steps'],
                os.path.join(work, f'medusa-{name}.ckpt'), SEED + 31 * len(name), lr=1e-3)
    atomic_save(heads.state_dict(), final)
    return heads


@torch.no_grad()
def adapter_heads_accuracy(model, loras, base_heads, adapter_heads, corp, p):
    """Top-1 per head of the base heads and of each adapter's own heads, on that adapter's greedy
    output for held-out prompts of its own text and of Shakespeare."""
    out = {}
    for name, heads in adapter_heads.items():
        own = ADAPTERS[name][0]
        for kind in dict.fromkeys([own, 'shakespeare']):
            ids, hid, first = self_distill(model, loras, [(name, corp[kind][1], 1.0)], p['medusa_eval_seqs'],
                                           SEED + 70, p['gen_tokens'])
            tg = medusa_targets(ids, MEDUSA_HEADS, first)
            out[f'{name} adapter greedy output, held-out {kind} prompts: base heads'] = head_accuracy(base_heads, hid, tg)
            out[f'{name} adapter greedy output, held-out {kind} prompts: {name} heads'] = head_accuracy(heads, hid, tg)
    return out


@torch.no_grad()
def heldout_loss(model, windows):
    return sum(lm_loss(model, windows[i:i + 8]).item() * len(windows[i:i + 8])
               for i in range(0, len(windows), 8)) / len(windows)


@torch.no_grad()
def head_accuracy(heads, hid, tg):
    """Top-1 accuracy per head over positions with a target."""
    logits = torch.cat([heads(hid[i:i + 8]) for i in range(0, len(hid), 8)])
    pred = logits.argmax(-1)
    ok = (pred == tg) & (tg >= 0)
    return [(ok[..., k].sum() / (tg[..., k] >= 0).sum()).item() for k in range(tg.shape[-1])]


def natural_targets(windows, heads):
    """Head k's target on running text: the real token at t+k+2."""
    return medusa_targets(windows, heads, 1)


@torch.no_grad()
def generate_text(model, tok, prompt_ids, n):
    """Greedy continuation: its text (up to the first `<|eos|>`) and all `n` token ids."""
    out = model.generate_greedy(torch.tensor([prompt_ids]), n)[0].tolist()
    cut = out.index(tok.eos_id) if tok.eos_id in out else len(out)
    return tok.decode(out[:cut]), out


def evaluate(work, model, tok, loras, heads, corp, p):
    log('eval: held-out losses')
    kinds = ['shakespeare', 'kjv', 'devil']
    windows = {k: corpora.eval_windows(corp[k][1], p['eval_windows'], p['seq'], SEED + 7) for k in kinds}
    losses = {'base': {k: heldout_loss(model, windows[k]) for k in kinds}}
    for name, lora in loras.items():
        lora.attach(model)
        losses[name] = {k: heldout_loss(model, windows[k]) for k in kinds}
        Lora.detach(model)
    log('eval: Medusa accuracy')
    sources = [('base', corp['shakespeare'][1], 1.0)]
    ids, hid, first = self_distill(model, loras, sources, p['medusa_eval_seqs'], SEED + 50, p['gen_tokens'])
    medusa = {'base greedy output, held-out Shakespeare prompts': head_accuracy(
        heads, hid, medusa_targets(ids, MEDUSA_HEADS, first))}
    for name, (kind, _) in ADAPTERS.items():
        ids, hid, first = self_distill(model, loras, [(name, corp[kind][1], 1.0)], p['medusa_eval_seqs'] // 2,
                                       SEED + 60, p['gen_tokens'])
        medusa[f'{name} adapter greedy output, held-out {name} prompts'] = head_accuracy(
            heads, hid, medusa_targets(ids, MEDUSA_HEADS, first))
    w = windows['shakespeare']
    medusa['held-out Shakespeare text (not the model\'s own output)'] = head_accuracy(
        heads, model.hidden(w)[0], natural_targets(w, MEDUSA_HEADS))
    log('eval: samples')
    base_prompts = ['ROMEO:\n', 'First Citizen:\nWhat say you', 'KING HENRY VI:\nThe crown']
    shared = ['The king said', 'Love is']
    chat_q = 'What is the meaning of love?'
    samples = {'base': [], 'shared': {}, 'chat': {}}
    expected = []
    n = p['gen_tokens'] // 2
    for pr in base_prompts:
        ids = [tok.bos_id] + tok.encode(pr)
        text, out = generate_text(model, tok, ids, n)
        samples['base'].append([pr, text])
        expected.append({'adapter': None, 'prompt': pr, 'ids': out})
    for who in ['base'] + list(loras):
        if who != 'base':
            loras[who].attach(model)
        samples['shared'][who] = []
        for pr in shared:
            ids = [tok.bos_id] + tok.encode(pr)
            text, out = generate_text(model, tok, ids, n)
            samples['shared'][who].append([pr, text])
            expected.append({'adapter': None if who == 'base' else who, 'prompt': pr, 'ids': out})
        cids = tok.encode(chat([{'role': 'user', 'content': chat_q}], add_generation_prompt=True))
        text, out = generate_text(model, tok, cids, n)
        samples['chat'][who] = [chat_q, text]
        Lora.detach(model)
    return {'losses': losses, 'medusa_top1': medusa, 'samples': samples, 'expected_greedy': expected,
            'medusa_eval_positions': 'generated tokens only (the heads see what speculation sees)'}


def export(out, model, tok, loras, heads, adapter_heads, p):
    os.makedirs(out, exist_ok=True)
    cfg = model.cfg
    config = OrderedDict(
        architectures=['LlamaForCausalLM'], model_type='llama', hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta, rope_scaling=None, tie_word_embeddings=False,
        torch_dtype='float32', bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, hidden_act='silu',
        initializer_range=0.02, use_cache=True, attention_bias=False, mlp_bias=False, pretraining_tp=1,
        transformers_version='4.46.0')
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, 'generation_config.json'), 'w') as f:
        json.dump({'bos_token_id': tok.bos_id, 'eos_token_id': tok.eos_id, 'max_new_tokens': 128}, f, indent=2)
    tok.write(out, cfg.max_position_embeddings)
    sd = model.state_dict()
    order = ['model.embed_tokens.weight']
    for l in range(cfg.num_hidden_layers):
        order += [f'model.layers.{l}.input_layernorm.weight']
        order += [f'model.layers.{l}.self_attn.{m}.weight' for m in PROJECTIONS[:4]]
        order += [f'model.layers.{l}.post_attention_layernorm.weight']
        order += [f'model.layers.{l}.mlp.{m}.weight' for m in PROJECTIONS[4:]]
    order += ['model.norm.weight', 'lm_head.weight']
    assert sorted(order) == sorted(sd), set(sd) ^ set(order)
    safetensors_io.save({k: sd[k] for k in order}, os.path.join(out, 'model.safetensors'), {'format': 'pt'})
    for i, (name, lora) in enumerate(loras.items()):
        d = os.path.join(out, 'adapters', name)
        os.makedirs(d, exist_ok=True)
        adapter_config = OrderedDict(
            peft_type='LORA', task_type='CAUSAL_LM', r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
            bias='none', fan_in_fan_out=False, inference_mode=True, init_lora_weights=True,
            target_modules=list(PROJECTIONS), use_rslora=False, use_dora=False,
            base_model_name_or_path='loom/demo', rank_pattern={}, alpha_pattern={}, layers_to_transform=None,
            layers_pattern=None, modules_to_save=None, revision=None)
        with open(os.path.join(d, 'adapter_config.json'), 'w') as f:
            json.dump(adapter_config, f, indent=2)
        state = lora.peft_state_dict(model)
        safetensors_io.save(state, os.path.join(d, 'adapter_model.safetensors'), {'format': 'pt'})
        if i == 0:
            # The same weights as a pickled state dict, as older PEFT versions saved them.
            torch.save(OrderedDict(state), os.path.join(d, 'adapter_model.bin'))
    # Version 2 only (the heads reuse the model's LM head): the kit ships what config/default.yaml
    # serves. verify-in-loom.ts writes the version 1 layout (a copy of lm_head per head) to test it.
    export_heads(os.path.join(out, 'medusa'), heads, cfg)
    export_adapter_heads(out, adapter_heads, cfg)


def export_heads(d, heads, cfg):
    """LoRAX's Medusa layout, version 2: `config.json` and `medusa_lm_head.safetensors`."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'config.json'), 'w') as f:
        json.dump(OrderedDict(medusa_num_heads=MEDUSA_HEADS, medusa_num_layers=1, version=2,
                              hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size,
                              base_model_name_or_path='loom/demo'), f, indent=2)
    safetensors_io.save(heads.lorax_state_dict(), os.path.join(d, 'medusa_lm_head.safetensors'), {'format': 'pt'})


def export_adapter_heads(out, adapter_heads, cfg):
    """Medusa+LoRA (LoRAX's MedusaLoraConfig): each adapter's heads beside its `adapter_config.json`."""
    for name, heads in adapter_heads.items():
        export_heads(os.path.join(out, 'adapters', name), heads, cfg)


def load_exported(out, tok):
    """The base model, adapters and base heads from an exported kit (`--adapter-heads-only`): the
    same tensors the work directory's final checkpoints held."""
    model = LlamaForCausalLM(model_config(tok))
    model.load_state_dict(safetensors_io.load(os.path.join(out, 'model.safetensors')))
    model.eval()
    loras = {}
    for name in ADAPTERS:
        lora = Lora(model, LORA_RANK, LORA_ALPHA, PROJECTIONS)
        state = safetensors_io.load(os.path.join(out, 'adapters', name, 'adapter_model.safetensors'))
        with torch.no_grad():
            for l, m, _ in model.projections():
                block = 'mlp' if m in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'
                prefix = f'base_model.model.model.layers.{l}.{block}.{m}'
                lora.a[f'{l}_{m}'].copy_(state.pop(f'{prefix}.lora_A.weight'))
                lora.b[f'{l}_{m}'].copy_(state.pop(f'{prefix}.lora_B.weight'))
        assert not state, list(state)
        loras[name] = lora
    heads = MedusaHeads(model.cfg, MEDUSA_HEADS, model.lm_head, own_lm_head=False)
    state = safetensors_io.load(os.path.join(out, 'medusa', 'medusa_lm_head.safetensors'))
    with torch.no_grad():
        for h, block in enumerate(heads.blocks):
            block.weight.copy_(state.pop(f'{h}.0.linear.weight'))
            block.bias.copy_(state.pop(f'{h}.0.linear.bias'))
    assert not state, list(state)
    return model, loras, heads


def adapter_heads_only(args, p, tok, corp):
    """Trains and exports only the adapters' own heads, on a kit already exported to `--out`
    (its base model and adapters unchanged), and adds their figures to the report in place."""
    model, loras, heads = load_exported(args.out, tok)
    report = json.load(open(args.report)) if args.report and os.path.exists(args.report) else {}
    # The loaded model must be the one the report's greedy samples came from.
    for e in report.get('expected_greedy', []):
        if e['adapter'] is not None:
            loras[e['adapter']].attach(model)
        ids = [tok.bos_id] + tok.encode(e['prompt'])
        _, got = generate_text(model, tok, ids, len(e['ids']))
        Lora.detach(model)
        assert got == e['ids'], f'{args.out} does not give the report\'s greedy tokens for {e}'
    adapter_heads = {}
    for name in ADAPTERS:
        t = time.time()
        done = os.path.exists(os.path.join(args.work, f'medusa-{name}-final.pt'))
        adapter_heads[name] = stage_adapter_medusa(args.work, name, model, loras, heads, corp, p)
        if not done:
            record_time(args.work, f'medusa-{name}', time.time() - t)
    export_adapter_heads(args.out, adapter_heads, model.cfg)
    report['adapter_medusa_top1'] = adapter_heads_accuracy(model, loras, heads, adapter_heads, corp, p)
    report.setdefault('preset', {}).update({k: p[k] for k in ('adapter_medusa_steps', 'adapter_medusa_seqs')})
    timings = json.load(open(os.path.join(args.work, 'timings.json')))
    report.setdefault('seconds', {}).update({k: v for k, v in timings.items() if k.startswith('medusa-')})
    report['sizes'] = {os.path.relpath(os.path.join(d, f), args.out): os.path.getsize(os.path.join(d, f))
                       for d, _, fs in os.walk(args.out) for f in sorted(fs)}
    with open(args.report or os.path.join(args.work, 'report.json'), 'w') as f:
        json.dump(report, f, indent=2)
    log('done')
    print(json.dumps(report['adapter_medusa_top1'], indent=2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--preset', choices=list(PRESETS), default='full')
    ap.add_argument('--out', default=os.path.join(ROOT, 'models', 'demo'))
    ap.add_argument('--work', default=os.path.join(HERE, 'work'))
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--report', default=None, help='where to write the report (default: <work>/report.json)')
    ap.add_argument('--set', action='append', default=[], help='override a preset value, e.g. base_steps=800')
    ap.add_argument('--adapter-heads-only', action='store_true',
                    help='train only the adapters\' own Medusa heads, on the kit already in --out')
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    for kv in args.set:
        k, v = kv.split('=')
        p[k] = type(p[k])(v)
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    t0 = time.time()
    log(f'preset {args.preset}: {p}')
    tok = stage_tokenizer(args.work)
    log(f'tokenizer: {tok.vocab_size} tokens')
    corp = {}
    for kind, fn in (('shakespeare', corpora.shakespeare), ('kjv', corpora.kjv), ('devil', corpora.devil)):
        tr, he = fn()
        corp[kind] = (corpora.Corpus(tok, kind, tr), corpora.Corpus(tok, kind, he))
        log(f'corpus {kind}: {len(corp[kind][0].ids)} train tokens, {len(corp[kind][1].ids)} held-out tokens')
    record_time(args.work, 'tokenizer and corpora', time.time() - t0)
    if args.adapter_heads_only:
        return adapter_heads_only(args, p, tok, corp)

    def timed(stage, fn):
        t = time.time()
        done = os.path.exists(os.path.join(args.work, f'{stage}-final.pt'))
        out = fn()
        if not done:
            record_time(args.work, stage, time.time() - t)
        return out

    model = timed('base', lambda: stage_base(args.work, tok, corp, p))
    model.eval()
    loras = {name: timed(f'lora-{name}', lambda n=name, k=kind: stage_lora(args.work, n, model, corp[k][0], p))
             for name, (kind, _) in ADAPTERS.items()}
    heads = timed('medusa', lambda: stage_medusa(args.work, model, loras, corp, p))
    adapter_heads = {name: timed(f'medusa-{name}', lambda n=name: stage_adapter_medusa(
        args.work, n, model, loras, heads, corp, p)) for name in ADAPTERS}
    t = time.time()
    report = evaluate(args.work, model, tok, loras, heads, corp, p)
    report['adapter_medusa_top1'] = adapter_heads_accuracy(model, loras, heads, adapter_heads, corp, p)
    report['tokenizer_cases'] = tokenizer_cases(tok, corp)
    report['preset'] = p
    export(args.out, model, tok, loras, heads, adapter_heads, p)
    record_time(args.work, 'eval and export', time.time() - t)
    report['seconds'] = json.load(open(os.path.join(args.work, 'timings.json')))
    report['sizes'] = {os.path.relpath(os.path.join(d, f), args.out): os.path.getsize(os.path.join(d, f))
                       for d, _, fs in os.walk(args.out) for f in sorted(fs)}
    with open(args.report or os.path.join(args.work, 'report.json'), 'w') as f:
        json.dump(report, f, indent=2)
    log(f'done; stage seconds {report["seconds"]}')
    print(json.dumps({k: report[k] for k in ('losses', 'medusa_top1', 'samples')}, indent=2))


if __name__ == '__main__':
    main()

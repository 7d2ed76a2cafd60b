"""Prints the Results section of README.md from a report written by train.py."""
import json
import sys


def fence(text):
    return '```\n' + text.rstrip('\n') + '\n```'


def main(path):
    r = json.load(open(path))
    out = []
    s = r['seconds']
    total = sum(s.values())
    out.append(f"Preset `full`: {r['preset']}.\n")
    out.append('Wall time per stage (2 threads, `nice -n 19` on the shared 2-core machine, so the figures '
               'include time other jobs took):\n')
    out.append('| stage | seconds |\n|---|---|')
    for k, v in s.items():
        out.append(f'| {k} | {v} |')
    out.append(f'| **total** | **{total}** ({total / 60:.1f} min) |\n')
    sizes = r['sizes']
    out.append(f"Artifacts: {sum(sizes.values()) / 1e6:.1f} MB in all.\n")
    out.append('| file | bytes |\n|---|---|')
    for k, v in sizes.items():
        out.append(f'| `{k}` | {v:,} |')
    out.append('')
    kinds = ['shakespeare', 'kjv', 'devil']
    out.append('### Held-out loss (nats per token, lower is better)\n')
    out.append('Mean next-token cross-entropy on fixed held-out windows of each text '
               f"({r['preset']['eval_windows']} windows of {r['preset']['seq']} tokens).\n")
    out.append('| model | Shakespeare | KJV Bible | Devil\'s Dictionary |\n|---|---|---|---|')
    for who, row in r['losses'].items():
        cells = []
        for k in kinds:
            v = row[k]
            own = (who == 'kjv' and k == 'kjv') or (who == 'devil' and k == 'devil')
            cells.append(f'**{v:.3f}**' if own else f'{v:.3f}')
        out.append(f"| {'base' if who == 'base' else who + ' adapter'} | " + ' | '.join(cells) + ' |')
    out.append('')
    out.append('### Medusa heads: top-1 accuracy per head\n')
    out.append('Head h predicts the token h + 2 places ahead of the position it reads. "Greedy output" rows '
               'score the heads against the model\'s own greedy continuation of held-out prompts (what '
               'speculation is verified against); the last row scores them against the real held-out text.\n')
    n = len(next(iter(r['medusa_top1'].values())))
    out.append('| data | ' + ' | '.join(f'head {h} (t+{h + 2})' for h in range(n)) + ' |')
    out.append('|---' * (n + 1) + '|')
    for k, v in r['medusa_top1'].items():
        out.append(f'| {k} | ' + ' | '.join(f'{x:.3f}' for x in v) + ' |')
    out.append('')
    if 'adapter_medusa_top1' in r:
        out.append("### The adapters' own Medusa heads: top-1 accuracy per head\n")
        out.append('Each adapter\'s greedy output for held-out prompts of its own text and of Shakespeare, scored '
                   'with the base heads (`medusa/`) and with the heads trained on that adapter\'s output '
                   '(`adapters/<name>/medusa_lm_head.safetensors`).\n')
        out.append('| data: heads | ' + ' | '.join(f'head {h} (t+{h + 2})' for h in range(n)) + ' |')
        out.append('|---' * (n + 1) + '|')
        for k, v in r['adapter_medusa_top1'].items():
            out.append(f'| {k} | ' + ' | '.join(f'{x:.3f}' for x in v) + ' |')
        out.append('')
    out.append('### Samples (greedy)\n')
    out.append('Base model:\n')
    for prompt, text in r['samples']['base']:
        out.append(fence(prompt + text))
    out.append('\nOne prompt through the base model and each adapter:\n')
    for who, rows in r['samples']['shared'].items():
        for prompt, text in rows:
            out.append(f'{who}:\n' + fence(prompt + text))
    out.append('\nChat (`/v1/chat/completions` renders the same template):\n')
    for who, (q, a) in r['samples']['chat'].items():
        out.append(f'{who}, user "{q}":\n' + fence(a))
    print('\n'.join(out))


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tools/demo-model/results.json')

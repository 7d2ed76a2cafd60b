"""Print a dictd database (index + dictzip data) as plain text: the source's notice, then every
entry once, in the order the data file stores them, separated by blank lines."""
import gzip
import sys

B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'


def b64_number(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def main(index_path: str, dict_path: str) -> None:
    data = gzip.open(dict_path).read().decode('utf-8')
    spans = {}
    info = None
    for line in open(index_path, encoding='utf-8'):
        word, off, length = line.rstrip('\n').split('\t')
        span = (b64_number(off), b64_number(length))
        if word == '00databaseinfo':
            info = span
        elif not word.startswith('00database'):
            spans[span] = word
    out = []
    if info is not None:
        out.append(data[info[0]:info[0] + info[1]].strip('\n'))
    for off, length in sorted(spans):
        out.append(data[off:off + length].strip('\n'))
    sys.stdout.write('\n\n'.join(out) + '\n')


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])

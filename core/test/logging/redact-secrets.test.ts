import t from 'tap'
import { REDACTED, redactSecrets } from '../../src/logging/index.ts'

t.test('credentials in text are replaced', async (t) => {
  const cases: Array<[string, string]> = [
    ['Authorization: Bearer abc.DEF-123_x', `Authorization: Bearer ${REDACTED}`],
    ['sent bearer eyJhbGciOi.eyJzdWIi.sig== upstream', `sent bearer ${REDACTED} upstream`],
    ['Basic dXNlcjpwYXNz', `Basic ${REDACTED}`],
    ['Authorization: plain-secret-value', `Authorization: ${REDACTED}`],
    ['token hf_abcdefghijklmnopqrstuvwxyz012345 refused', `token ${REDACTED} refused`],
    ['org token api_org_abcdefghijklmnopqrstuvwx', `org token ${REDACTED}`],
    ['pb_0123456789abcdefABCDEF and sk-proj-0123456789abcdef', `${REDACTED} and ${REDACTED}`],
    [
      'GET https://hub.example/api/x?api_token=s3cr3t&revision=main failed',
      `GET https://hub.example/api/x?api_token=${REDACTED}&revision=main failed`,
    ],
    ['?apiToken=a&access_token=b&token=c', `?apiToken=${REDACTED}&access_token=${REDACTED}&token=${REDACTED}`],
    [
      'https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=ab12&X-Amz-Security-Token=zz',
      `https://b.s3.amazonaws.com/k?X-Amz-Credential=${REDACTED}&X-Amz-Signature=${REDACTED}&X-Amz-Security-Token=${REDACTED}`,
    ],
    ['aws_secret_access_key=wJalrXUtnFEMI/K7MDENG', `aws_secret_access_key=${REDACTED}`],
    ['aws_secret_access_key: wJalrXUtnFEMI/K7MDENG', `aws_secret_access_key: ${REDACTED}`],
    ['secretAccessKey: "wJalrXUtnFEMI", next', `secretAccessKey: ${REDACTED}, next`],
    ['body {"inputs":"x","api_token":"tok\\"en"}', `body {"inputs":"x","api_token":"${REDACTED}"}`],
    ['{"accessToken": "abc"}', `{"accessToken": "${REDACTED}"}`],
    ['https://user:hunter2@proxy.example:8080/x', `https://user:${REDACTED}@proxy.example:8080/x`],
  ]
  for (const [input, expected] of cases) t.equal(redactSecrets(input), expected, input)
})

t.test('ordinary text is left alone', async (t) => {
  for (const text of [
    'Adapter `hf_internal/tiny-lora` was not found in source `hub`',
    'max_new_tokens=20 eos_token=</s> tokens=5',
    'Token limit exceeded: 4096 tokens',
    'Input validation error: `parameters.top_p` must be > 0 and <= 1; received 1.5',
    'https://huggingface.co/org/model/resolve/main/adapter_config.json',
    'Bearer',
    '',
  ]) {
    t.equal(redactSecrets(text), text, text)
  }
})

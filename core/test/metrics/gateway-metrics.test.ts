import { Registry } from 'prom-client'
import t from 'tap'
import { adapterListItem, registerGatewayMetrics, type GatewaySample } from '../../src/metrics/gateway-metrics.ts'

const sample = (over: Partial<GatewaySample> = {}): GatewaySample => ({
  runningRequests: 3,
  queuedRequests: 1,
  kvBlocksTotal: 200,
  kvBlocksFree: 150,
  runningAdapters: ['a'],
  waitingAdapters: [],
  adapterSlots: 4,
  ...over,
})

t.test('the adapter labels: the time of the last change, one series, lists that split cleanly', async (t) => {
  const registry = new Registry()
  let current: GatewaySample | undefined = undefined
  let clock = 1000
  registerGatewayMetrics(
    registry,
    () => current,
    () => clock,
  )
  const info = async () => (await registry.getSingleMetricAsString('vllm:lora_requests_info')).split('\n').slice(2)

  t.same(await info(), ['vllm:lora_requests_info{running_lora_adapters="",waiting_lora_adapters="",max_lora="0"} 1000'])
  current = sample()
  clock = 1005
  t.same(await info(), [
    'vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters="",max_lora="4"} 1005',
  ])
  clock = 1010
  t.same(
    await info(),
    ['vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters="",max_lora="4"} 1005'],
    'unchanged labels keep the time of their change',
  )
  current = sample({ runningAdapters: ['a', 'b,c'], waitingAdapters: ['hf_abcdefghijklmnopqrstuvwxyz0123456789'] })
  t.same(await info(), [
    'vllm:lora_requests_info{running_lora_adapters="a,b%2Cc",waiting_lora_adapters="redacted",max_lora="4"} 1010',
  ])
  const kv = await registry.getSingleMetricAsString('vllm:kv_cache_usage_perc')
  t.match(kv, /^vllm:kv_cache_usage_perc 0\.25$/m, 'a fraction of the blocks in use')
})

t.test('adapterListItem', async (t) => {
  t.equal(adapterListItem('owner/name@rev'), 'owner/name@rev')
  t.equal(adapterListItem('50%,off'), '50%25%2Coff')
})

// Nodes (docs/cluster.md): the servers sharing this one's backend, their
// heartbeats and the handlers each runs.

import { api } from '../api.js';
import { h, fill, time, table, setRows, td, emptyRow, errorBanner, heading } from '../dom.js';

export function list(root) {
  const errors = h('div');
  const mode = h('p', { class: 'muted', 'data-testid': 'nodes-mode' });
  const { table: tableEl, body } = table(
    [['Node'], ['Address'], ['Version'], ['Started'], ['Last heartbeat'], ['Handlers']],
    { 'data-testid': 'nodes-table' });
  fill(root, heading('Nodes', mode), errors, h('div', { class: 'card' }, tableEl));

  return {
    async refresh() {
      let answer;
      try {
        answer = await api('GET', '/v1/nodes');
        fill(errors);
      } catch (e) {
        fill(errors, errorBanner(e));
        return;
      }
      mode.textContent = answer.clustered
        ? `Cluster mode: ${answer.nodes.length} node${answer.nodes.length === 1 ? '' : 's'} share the backend and every handler change.`
        : 'This server owns its backend alone (a backend shared by several servers runs them in cluster mode).';
      if (!answer.nodes.length) {
        fill(body, emptyRow(6, 'No node has sent a heartbeat yet.'));
        return;
      }
      if (body.querySelector('.empty-row')) fill(body);
      setRows(body, answer.nodes, (n) => n.id, (n) => h('tr', {},
        td([h('span', { class: 'mono strong', text: n.id }), n.id === answer.this_node ? h('span', { class: 'badge running small', text: 'this one' }) : null]),
        td(h('span', { class: 'mono', text: n.address })),
        td(n.version),
        td(time(n.started_at)),
        td(time(n.heartbeat_at)),
        td(n.handlers.length
          ? h('div', { class: 'chips' }, n.handlers.map((x) => h('a', { href: `#/handlers/${encodeURIComponent(x.name)}`, class: 'chip', title: x.digest ? `sha256:${x.digest}` : undefined },
            `${x.name} v${x.version ?? '–'}`, h('span', { class: `badge ${x.status} small`, text: x.status }))))
          : h('span', { class: 'muted', text: 'none' }))));
    },
  };
}

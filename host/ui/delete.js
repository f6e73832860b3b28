// Deleting a stream or a group from the console
// (docs/operations.md#deleting-streams-and-groups): a closed "Delete"
// section at the foot of its page. The button stays disabled until the
// name is typed, the same confirmation the API asks for with
// `?confirm=true`; a checkbox adds `force=true`, which removes the handlers
// consuming it first.

import { api } from './api.js';
import { h, fill, errorBanner } from './dom.js';

/**
 * `what`: "stream" or "group"; `name`: what must be typed; `path`: the
 * API path to delete; `consequence`: one sentence of what goes;
 * `afterwards`: the hash to show once deleted.
 */
export function deleteSection({ what, name, path, consequence, afterwards }) {
  const id = `delete-${what}-name`;
  const typed = h('input', { id, type: 'text', autocomplete: 'off', spellcheck: 'false',
    'data-testid': `delete-${what}-name`, placeholder: name });
  const force = h('input', { id: `delete-${what}-force`, type: 'checkbox', 'data-testid': `delete-${what}-force` });
  const button = h('button', { type: 'button', class: 'danger', disabled: true,
    'data-testid': `delete-${what}`, text: `Delete ${what} ${name}` });
  const errors = h('div');
  typed.addEventListener('input', () => { button.disabled = typed.value !== name; });
  button.addEventListener('click', async () => {
    fill(errors);
    button.disabled = true;
    const query = force.checked ? '?confirm=true&force=true' : '?confirm=true';
    try {
      await api('DELETE', `${path}${query}`);
      window.location.hash = afterwards;
    } catch (e) {
      fill(errors, errorBanner(e));
      button.disabled = typed.value !== name;
    }
  });
  return h('details', { class: 'card danger-zone', 'data-write': true, 'data-testid': `delete-${what}-section` },
    h('summary', { text: `Delete this ${what}…` }),
    h('p', { text: `${consequence} This cannot be undone.` }),
    h('div', { class: 'field' }, h('label', { for: id, text: `Type ${name} to confirm` }), typed),
    h('div', { class: 'field check' }, force,
      h('label', { for: force.id, text: 'Also remove the handlers consuming it (each finishes its leases first)' })),
    errors,
    h('div', { class: 'actions' }, button));
}

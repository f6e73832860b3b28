// What the write forms share: a labelled field, a button that is busy
// while its request runs, the start point of a group (docs/groups.md,
// "Groups and start positions"), and a typed confirmation — the console's
// form of the CLI's --confirm.

import { h, fill, errorBanner } from './dom.js';

/** A label over a control, with an optional hint under it. */
export function field(label, control, hint) {
  return h('div', { class: 'field' }, h('label', { for: control.id, text: label }), control,
    hint ? h('span', { class: 'hint', text: hint }) : null);
}

/** Runs `action` with `button` disabled; shows its error, or its notice text. */
export async function busy(button, errors, notice, action) {
  button.disabled = true;
  try {
    const text = await action();
    fill(errors);
    if (text) fill(notice, h('div', { class: 'notice', 'data-testid': 'notice', text }));
  } catch (e) {
    fill(notice);
    fill(errors, errorBanner(e));
  } finally {
    button.disabled = false;
  }
}

/** Parses a JSON object typed into `what`; an empty text is `undefined`. */
export function jsonObject(text, what) {
  if (!text.trim()) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what} is not JSON: ${e.message}`);
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${what} must be a JSON object`);
  return value;
}

/** `0, 2` → [0, 2]; an empty text is `undefined`. */
export function numberList(text, what) {
  if (!text.trim()) return undefined;
  return text.split(',').map((item) => {
    const n = Number(item.trim());
    if (!item.trim() || !Number.isInteger(n) || n < 0) throw new Error(`${what}: ${JSON.stringify(item.trim())} is not a whole number`);
    return n;
  });
}

/** RFC 3339 from a datetime-local value (the browser's zone). */
export function isoOf(local) {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

/**
 * Where a group starts (or starts again): the beginning, after a sequence
 * (`start_after`), at a time (`start_at`), or only events appended from
 * now (`start_at` now: each partition starts at its end). `prefix` keeps
 * the ids apart. Returns {element, fields()} where fields() gives the
 * body's `start_after` / `start_at`.
 */
export function startPoint(prefix) {
  const choice = h('select', { id: `${prefix}-start`, 'data-testid': `${prefix}-start` },
    h('option', { value: 'beginning', text: 'The beginning' }),
    h('option', { value: 'after', text: 'After a sequence' }),
    h('option', { value: 'at', text: 'At a time' }),
    h('option', { value: 'now', text: 'New events only' }));
  const sequence = h('input', { id: `${prefix}-start-after`, type: 'number', min: 0, placeholder: '41',
    'data-testid': `${prefix}-start-after` });
  const at = h('input', { id: `${prefix}-start-at`, type: 'datetime-local', step: 1, 'data-testid': `${prefix}-start-at` });
  const afterField = field('After sequence (every partition)', sequence);
  const atField = field('From (your time zone)', at);
  const show = () => {
    afterField.hidden = choice.value !== 'after';
    atField.hidden = choice.value !== 'at';
  };
  choice.addEventListener('change', show);
  show();
  return {
    element: [field('Start', choice), afterField, atField],
    fields() {
      if (choice.value === 'after') {
        if (sequence.value === '') throw new Error('Give the sequence to start after.');
        return { start_after: Number(sequence.value) };
      }
      if (choice.value === 'at') {
        const iso = isoOf(at.value);
        if (!iso) throw new Error('Give the time to start at.');
        return { start_at: iso };
      }
      if (choice.value === 'now') return { start_at: new Date().toISOString() };
      return {};
    },
  };
}

/**
 * A typed confirmation: `button` stays disabled until `name` is typed
 * into the returned input (docs/console.md, as deleting does).
 */
export function typedConfirmation(id, name, button) {
  const input = h('input', { id, type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: name, 'data-testid': id });
  button.disabled = true;
  input.addEventListener('input', () => { button.disabled = input.value !== name; });
  return {
    element: field(`Type ${name} to confirm`, input),
    confirmed: () => input.value === name,
    clear() {
      input.value = '';
      button.disabled = true;
    },
  };
}

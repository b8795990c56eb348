// uroce console: the browser side.
//
// One WebSocket to the daemon (docs/console.md) brings four kinds of message:
// `hello` once, `snapshot` every 500 ms (devices and QPs), `packets` every
// 100 ms (packet records for the ladder) and `result` (answers to the `step`
// and `fault` commands this page sends). Everything on the page is drawn from
// those, with plain DOM calls: every piece of text from the daemon or from a
// file goes in through textContent or a text node, never as markup.
//
// Memory is bounded everywhere: at most RECORDS_MAX_KEPT packet records,
// HISTORY_SAMPLES snapshots of counters per device, LADDER_MAX_DRAWN packets
// drawn, REPLAY_MAX_PACKETS packets from an opened file.
'use strict';

(() => {
  // ---------------------------------------------------------------- limits

  const SNAPSHOT_MIN_INTERVAL_MS = 500;  // render snapshots at most this often
  const LADDER_MIN_INTERVAL_MS = 200;    // redraw the ladder at most this often
  const LADDER_MAX_DRAWN = 500;          // packets on the ladder at once
  const RECORDS_MAX_KEPT = 10000;        // packet records kept for the pcap
  const HISTORY_SAMPLES = 61;            // 61 snapshots give 60 rates
  const RECONNECT_MS = 2000;
  const REPLAY_MAX_PACKETS = 10000;
  const REPLAY_PAGE = 250;               // packets skipped by Earlier/Later
  const SEEN_KEYS_MAX = 50000;           // (endpoint, opcode family, PSN) remembered
  const HEX_BYTES_KEPT = 256;            // the daemon keeps this many bytes, so do we
  const DECODE_BATCH = 100;              // packets to a decode command (the daemon's bound)
  const ROCE_PORT = 4791;

  // ------------------------------------------------------------- DOM helpers

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const $ = (selector, root = document) => root.querySelector(selector);

  // Sets attributes (and a few conveniences) on a node. `text` goes through
  // textContent; `on*` become listeners; null/undefined/false are skipped.
  function applyProps(node, props) {
    if (!props) return;
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'class') node.setAttribute('class', value);
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
  }

  // Children may be nodes, strings (become text nodes) or nested arrays.
  function appendChildren(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  // Replaces a node's children; like replaceChildren, but arrays are
  // flattened and null/false skipped (replaceChildren would print them).
  function setChildren(node, ...children) {
    node.replaceChildren();
    appendChildren(node, children);
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    applyProps(node, props);
    appendChildren(node, children);
    return node;
  }

  function svg(tag, props, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    applyProps(node, props);
    appendChildren(node, children);
    return node;
  }

  // A two-column table of [label, value] rows; a value may be a node.
  function factTable(rows, className = 'facts') {
    return el('table', { class: className },
      el('tbody', null, rows.filter(Boolean).map(([label, value, title]) =>
        el('tr', { title }, el('th', { scope: 'row' }, label), el('td', null, value)))));
  }

  // ------------------------------------------------------------- formatting

  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

  function fmtInt(n) {
    if (typeof n === 'bigint') return n.toString();
    return isNum(n) ? Math.round(n).toLocaleString('en-US') : '–';
  }

  // Microseconds as the unit a person reads best: 840 µs, 65 ms, 2.06 s.
  function fmtDurationUs(us) {
    if (!isNum(us)) return '–';
    const a = Math.abs(us);
    if (a < 1000) return `${Math.round(us)} µs`;
    if (a < 10000) return `${(us / 1000).toFixed(2)} ms`;
    if (a < 1e6) return `${(us / 1000).toFixed(1)} ms`;
    if (a < 60e6) return `${(us / 1e6).toFixed(2)} s`;
    return `${(us / 60e6).toFixed(1)} min`;
  }

  function fmtAgo(inUs) {
    if (!isNum(inUs)) return '';
    return inUs <= 0 ? `${fmtDurationUs(-inUs)} ago` : `in ${fmtDurationUs(inUs)}`;
  }

  function fmtClock(unixMs) {
    if (!isNum(unixMs)) return '';
    const d = new Date(unixMs);
    const pad = (n, w = 2) => String(n).padStart(w, '0');
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function fmtRate(r) {
    if (!isNum(r)) return '–';
    if (r === 0) return '0';
    if (Math.abs(r) < 10) return r.toFixed(1);
    if (Math.abs(r) < 10000) return Math.round(r).toLocaleString('en-US');
    if (Math.abs(r) < 1e6) return `${(r / 1000).toFixed(1)}k`;
    return `${(r / 1e6).toFixed(2)}M`;
  }

  function fmtPercent(p) {
    if (!isNum(p)) return '–';
    return `${+(p * 100).toFixed(2)}%`;
  }

  const hex2 = (n) => n.toString(16).padStart(2, '0');

  function fmtHex(v, digits = 0) {
    if (typeof v === 'bigint') return `0x${v.toString(16).padStart(digits, '0')}`;
    if (!isNum(v) || v < 0) return String(v);
    return `0x${v.toString(16).padStart(digits, '0')}`;
  }

  // Any JSON value as short text (the daemon may add fields we do not know).
  function fmtValue(v) {
    if (v === null || v === undefined) return '–';
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (typeof v === 'number' || typeof v === 'bigint') return String(v);
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) return v.map(fmtValue).join(', ');
    return Object.entries(v).map(([k, x]) => `${k} ${fmtValue(x)}`).join(' · ');
  }

  // ------------------------------------------------------- RoCEv2 knowledge

  // The wire's facts as the daemon's hello gives them (wire/ in the daemon,
  // which decodes every packet the page shows): opcode names by number,
  // each header's bytes, the ICRC's, and the RNR NAK timer's codes in µs.
  function wire() {
    return (state.hello && state.hello.wire) ||
      { opcodes: {}, header_bytes: {}, icrc_bytes: 0, rnr_timer_us: [] };
  }

  // The order headers follow each other on the wire (every opcode's headers
  // are a subsequence of it). The daemon's JSON objects come with their keys
  // sorted by name, so the page puts them back in this order.
  const HEADER_ORDER = ['BTH', 'DETH', 'XRCETH', 'FETH', 'RETH', 'AtomicETH', 'AETH', 'AtomicAckETH',
    'ImmDt', 'IETH', 'CNP reserved'];
  // Each header's fields in wire order; fields not listed follow.
  const FIELD_ORDER = {
    BTH: ['opcode', 'solicited', 'migreq', 'pad', 'tver', 'pkey', 'fecn', 'becn', 'dest_qp', 'ack_req', 'psn'],
    DETH: ['qkey', 'src_qp'],
    RETH: ['va', 'rkey', 'length'],
    FETH: ['placement_type', 'selectivity'],
    AtomicETH: ['va', 'rkey', 'swap_add', 'compare'],
    AETH: ['syndrome', 'kind', 'code', 'rnr_timer', 'rnr_wait_us', 'credits', 'msn'],
  };

  function orderedHeaders(headers) {
    const rank = (name) => (HEADER_ORDER.includes(name) ? HEADER_ORDER.indexOf(name) : HEADER_ORDER.length);
    return Object.entries(headers || {}).sort(([a], [b]) => rank(a) - rank(b));
  }

  function orderedFields(header, fields) {
    const order = FIELD_ORDER[header] || [];
    const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length);
    return Object.entries(fields || {}).sort(([a], [b]) => rank(a) - rank(b));
  }

  // One line per header, for students meeting them for the first time.
  const HEADER_CAPTIONS = {
    BTH: 'Base Transport Header, in every packet: opcode, destination QP, PSN.',
    DETH: 'Datagram Extended Transport Header (UD): the Q_Key and the sending QP.',
    XRCETH: 'XRC Extended Transport Header: the XRC SRQ that receives the message.',
    RETH: 'RDMA Extended Transport Header: remote virtual address, R_Key and length.',
    FETH: 'Flush Extended Transport Header: what a FLUSH makes durable or visible.',
    AtomicETH: 'Atomic Extended Transport Header: address, R_Key and operands.',
    AETH: 'ACK Extended Transport Header: ACK, NAK or RNR NAK, and the message sequence number.',
    AtomicAckETH: 'Atomic ACK Extended Transport Header: the value before the atomic operation.',
    ImmDt: 'Immediate data, delivered in the receiver\'s completion.',
    IETH: 'Invalidate Extended Transport Header: the R_Key the receiver invalidates.',
    'CNP reserved': 'Congestion Notification Packet padding.',
  };

  // Fields shown in hex as well as decimal: keys, addresses, QP numbers.
  const HEX_FIELDS = new Set(['pkey', 'dest_qp', 'src_qp', 'qkey', 'va', 'rkey', 'swap_add',
    'compare', 'original', 'imm', 'xrc_srq', 'syndrome']);

  function opcodeName(opcode) {
    return wire().opcodes[opcode] ?? `OPCODE_0x${hex2(opcode)}`;
  }

  // The opcode without transport and position, so that a retransmitted
  // SEND_FIRST and SEND_MIDDLE of one message both read as SEND.
  function opcodeFamily(name) {
    const op = String(name).replace(/^(RC|UC|RD|UD|XRC)_/, '');
    for (const family of ['SEND', 'RDMA_WRITE', 'RDMA_READ_RESPONSE', 'RDMA_READ_REQUEST',
      'ATOMIC_ACKNOWLEDGE', 'ACKNOWLEDGE']) {
      if (op.startsWith(family)) return family;
    }
    return op;
  }

  // request, response, nak or other: picks the arrow's colour.
  function packetKind(packet) {
    if (!packet || packet.error) return 'malformed';
    const aeth = packet.headers && packet.headers.AETH;
    if (aeth && (aeth.kind === 'NAK' || aeth.kind === 'RNR NAK')) return 'nak';
    const op = String(packet.opcode || '');
    if (/ACKNOWLEDGE|READ_RESPONSE/.test(op)) return 'response';
    if (op === 'CNP') return 'other';
    return 'request';
  }

  function aethText(aeth) {
    if (!aeth) return '';
    if (aeth.kind === 'NAK') return `NAK (${aeth.code ?? 'reserved'})`;
    if (aeth.kind === 'RNR NAK') return `RNR NAK (${aeth.rnr_timer ?? (aeth.syndrome & 0x1f)})`;
    return String(aeth.kind ?? 'AETH');
  }

  // The ladder's label: "RC_SEND_ONLY psn 4096 · 64 B", "RC_ACKNOWLEDGE psn 7 · ACK".
  function packetLabel(packet) {
    if (!packet) return 'no packet';
    if (packet.error) return `malformed: ${packet.error} (${packet.bytes_total ?? '?'} B)`;
    let text = `${packet.opcode} psn ${packet.psn}`;
    if (packet.payload_bytes > 0) text += ` · ${packet.payload_bytes} B`;
    const aeth = packet.headers && packet.headers.AETH;
    if (aeth) text += ` · ${aethText(aeth)}`;
    return text;
  }

  // --------------------------------------------------------------- state

  const state = {
    socket: null,
    reconnectTimer: null,
    hello: null,
    readOnly: true,          // no controls until hello says otherwise
    snapshot: null,
    snapshotTimer: null,
    lastSnapshotRender: -Infinity,
    history: new Map(),      // device name -> [{t, counters}], HISTORY_SAMPLES at most
    live: [],                // ladder entries from the daemon, RECORDS_MAX_KEPT at most
    lastSeq: 0,
    checkEpoch: false,       // after a (re)connect: is it still the same console?
    tracker: null,           // RetransmissionTracker for live records
    missed: 0,
    received: 0,             // records received since the last clear
    replay: null,            // {name, entries, end, skipped}
    ladder: {
      paused: false, timer: null, lastDraw: -Infinity, stick: true,
      drawn: [], source: null, selectedSeq: null,
    },
    selectedQp: null,        // "device/qpn"
    lastQp: null,            // the selected QP as last seen (it may be destroyed)
    nextCommandId: 1,
    pending: new Map(),      // command id -> result element
    decoding: new Map(),     // decode command id -> its promise's resolve and reject
    heldSelection: new Map(),  // device -> chosen held packet id
    faultEdited: new Set(),  // devices whose fault form the user is editing
    pageStartUs: Date.now() * 1000,
  };

  // ------------------------------------------------ retransmission marking

  // Marks a record as a retransmission (or duplicate) when its sender already
  // sent the same (opcode family, PSN). A packet held by step mode is recorded
  // again when it leaves (released, then sent or lost): that departure is the
  // same packet, not a new one, unless the packet already left once (a step
  // `duplicate` sent a copy and kept it).
  class RetransmissionTracker {
    constructor() {
      this.seen = new Set();
      this.held = new Map();       // "device#step_id" -> {key, departures, repeat}
      this.releasing = new Map();  // device -> step_id of the release just recorded
    }

    static key(rec) {
      const p = rec.packet;
      if (!p || p.error || p.opcode === 'CNP' || !isNum(p.psn)) return null;
      return `${rec.device}/${rec.src_qp}|${opcodeFamily(p.opcode)}|${p.psn}`;
    }

    remember(key) {
      if (key === null || this.seen.has(key)) return;
      this.seen.add(key);
      if (this.seen.size > SEEN_KEYS_MAX) this.seen.delete(this.seen.values().next().value);
    }

    // Returns true when rec repeats a packet its sender sent before.
    classify(rec) {
      const key = RetransmissionTracker.key(rec);
      if (rec.fate === 'released') {
        this.releasing.set(rec.device, rec.step_id);
        return false;
      }
      const repeat = key !== null && this.seen.has(key);
      if (rec.fate === 'held') {
        this.remember(key);
        this.held.set(`${rec.device}#${rec.step_id}`, { key, departures: 0, repeat });
        if (this.held.size > 4096) this.held.delete(this.held.keys().next().value);
        return repeat;
      }
      // sent or lost: a held packet leaving, or a new transmission?
      const stepId = rec.step_id || this.releasing.get(rec.device);
      this.releasing.delete(rec.device);
      const held = stepId ? this.held.get(`${rec.device}#${stepId}`) : undefined;
      if (held && held.key === key) {
        held.departures += 1;
        return held.repeat || held.departures > 1;
      }
      this.remember(key);
      return repeat;
    }
  }
  state.tracker = new RetransmissionTracker();

  // A record plus what the page derives from it once.
  function makeEntry(rec, tracker) {
    return {
      rec,
      seq: rec.seq,
      label: packetLabel(rec.packet),
      kind: packetKind(rec.packet),
      retx: tracker.classify(rec),
    };
  }

  // ------------------------------------------------------------ connection

  function socketUrl() {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    // The cookie carries the token; the query string too, for a page opened
    // where cookies are off.
    const token = new URLSearchParams(location.search).get('token');
    return `${scheme}://${location.host}/ws${token ? `?token=${encodeURIComponent(token)}` : ''}`;
  }

  function connect() {
    state.reconnectTimer = null;
    let socket;
    try {
      socket = new WebSocket(socketUrl());
    } catch (error) {
      setStatus(false, `cannot connect: ${error.message}`);
      scheduleReconnect();
      return;
    }
    state.socket = socket;
    setStatus(false, 'connecting…');
    socket.addEventListener('open', () => {
      state.checkEpoch = true;
      setStatus(true, '');
    });
    socket.addEventListener('message', (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        console.warn('uroce console: a message that is not JSON', error);
        return;
      }
      try {
        handleMessage(message);
      } catch (error) {
        console.error('uroce console: failed to handle a message', message && message.type, error);
      }
    });
    socket.addEventListener('close', () => {
      if (state.socket !== socket) return;
      state.socket = null;
      setStatus(false, `reconnecting every ${RECONNECT_MS / 1000} s`);
      failPending('the connection closed before the daemon answered');
      scheduleReconnect();
    });
  }

  function scheduleReconnect() {
    if (!state.reconnectTimer) state.reconnectTimer = setTimeout(connect, RECONNECT_MS);
  }

  function setStatus(connected, detail) {
    const status = $('#status');
    status.textContent = connected ? 'connected' : 'disconnected';
    status.classList.toggle('connected', connected);
    status.classList.toggle('disconnected', !connected);
    $('#status-detail').textContent = detail;
  }

  function handleMessage(message) {
    switch (message.type) {
      case 'hello': onHello(message); break;
      case 'snapshot': onSnapshot(message); break;
      case 'packets': onPackets(message); break;
      case 'result': onResult(message); break;
      default: break;  // a newer daemon's message: nothing to do with it
    }
  }

  // Sends a command; `resultEl` shows the daemon's answer, `what` says
  // what was asked (the daemon's success answer may carry no message).
  function sendCommand(command, resultEl, what) {
    const socket = state.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      showResult(resultEl, false, 'not connected to the daemon');
      return;
    }
    if (state.readOnly) {
      showResult(resultEl, false, 'this console is read-only');
      return;
    }
    const id = state.nextCommandId++;
    state.pending.set(id, { resultEl, what });
    showResult(resultEl, null, `${what}: sent, waiting for the daemon…`);
    socket.send(JSON.stringify({ id, ...command }));
  }

  function onResult(message) {
    const decoding = state.decoding.get(message.id);
    if (decoding) {
      state.decoding.delete(message.id);
      if (message.ok && Array.isArray(message.packets)) decoding.resolve(message.packets);
      else decoding.reject(new Error(message.message || 'the daemon did not decode the packets'));
      return;
    }
    const pending = state.pending.get(message.id);
    state.pending.delete(message.id);
    if (!pending) return;
    if (message.ok) {
      showResult(pending.resultEl, true, message.message || `${pending.what}: done`);
    } else {
      const reason = [message.error, message.message].filter(Boolean).join(': ');
      showResult(pending.resultEl, false, `${pending.what}: ${reason || 'refused'}`);
    }
    // Show the effect now rather than at the next snapshot.
    scheduleSnapshotRender();
  }

  function failPending(reason) {
    for (const { resultEl, what } of state.pending.values()) showResult(resultEl, false, `${what}: ${reason}`);
    state.pending.clear();
    for (const { reject } of state.decoding.values()) reject(new Error(reason));
    state.decoding.clear();
  }

  function showResult(resultEl, ok, text) {
    if (!resultEl) return;
    resultEl.textContent = text;
    resultEl.classList.toggle('ok', ok === true);
    resultEl.classList.toggle('error', ok === false);
    resultEl.classList.toggle('waiting', ok === null);
  }

  // ------------------------------------------------------------ messages

  function onHello(message) {
    const readOnly = !!message.read_only;
    const changed = state.hello === null || readOnly !== state.readOnly;
    state.hello = message;
    state.readOnly = readOnly;
    document.body.classList.toggle('read-only', readOnly);
    $('#read-only-badge').hidden = !readOnly;
    if (changed) {
      // Panels are built with or without their controls: start them again.
      $('#step-panels').replaceChildren();
      $('#fault-forms').replaceChildren();
    }
    scheduleSnapshotRender();
  }

  function onSnapshot(message) {
    state.snapshot = message;
    recordHistory(message);
    scheduleSnapshotRender();
  }

  // Counter values per device, to plot rates.
  function recordHistory(snapshot) {
    const names = new Set();
    for (const device of snapshot.devices || []) {
      names.add(device.name);
      let samples = state.history.get(device.name);
      if (!samples) state.history.set(device.name, samples = []);
      samples.push({ t: snapshot.time_ms, counters: { ...(device.counters || {}) } });
      if (samples.length > HISTORY_SAMPLES) samples.splice(0, samples.length - HISTORY_SAMPLES);
    }
    for (const name of [...state.history.keys()]) {
      if (!names.has(name)) state.history.delete(name);
    }
  }

  function onPackets(message) {
    const records = Array.isArray(message.records) ? message.records : [];
    if (state.checkEpoch && records.length > 0) {
      state.checkEpoch = false;
      if (isNewConsole(records[0])) startNewEpoch();
    }
    for (const rec of records) {
      if (!rec || !isNum(rec.seq) || rec.seq <= state.lastSeq) continue;  // already have it
      state.lastSeq = rec.seq;
      state.received += 1;
      state.live.push(makeEntry(rec, state.tracker));
    }
    if (state.live.length > RECORDS_MAX_KEPT) state.live.splice(0, state.live.length - RECORDS_MAX_KEPT);
    if (isNum(message.missed) && message.missed > 0) {
      state.missed += message.missed;
      updateMissed();
    }
    updateRecordingInfo();
    if (!state.replay) scheduleLadderDraw();
  }

  // After a reconnect, a record numbered like one seen before comes from a
  // new console (its numbers start again from 1) unless it is that very
  // record. When that cannot be checked (the page no longer holds it),
  // assume a new console: the other mistake would hide every new packet
  // until the numbers caught up.
  function isNewConsole(first) {
    if (!isNum(first.seq) || first.seq > state.lastSeq) return false;
    const known = findEntry(state.live, first.seq);
    return known ? known.rec.t_us !== first.t_us : true;
  }

  function startNewEpoch() {
    state.live = [];
    state.received = 0;
    state.lastSeq = 0;
    state.tracker = new RetransmissionTracker();
    state.missed = 0;
    updateMissed();
    $('#ladder-note').textContent = 'The console was restarted: the packets seen before are cleared.';
  }

  // Binary search of entries (sorted by seq).
  function findEntry(entries, seq) {
    let lo = 0;
    let hi = entries.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = entries[mid].seq;
      if (s === seq) return entries[mid];
      if (s < seq) lo = mid + 1; else hi = mid - 1;
    }
    return null;
  }

  function updateMissed() {
    const missed = $('#missed');
    missed.hidden = state.missed <= 0;
    missed.textContent = state.missed > 0
      ? `⚠ ${fmtInt(state.missed)} packets not shown: the page fell behind (the daemon's ring of 8192 packets moved on before the page read them).`
      : '';
  }

  // ------------------------------------------------------ snapshot render

  function scheduleSnapshotRender() {
    if (state.snapshotTimer) return;
    const wait = Math.max(0, state.lastSnapshotRender + SNAPSHOT_MIN_INTERVAL_MS - performance.now());
    state.snapshotTimer = setTimeout(() => {
      state.snapshotTimer = null;
      state.lastSnapshotRender = performance.now();
      renderSnapshot();
    }, wait);
  }

  function renderSnapshot() {
    if (!state.snapshot) return;
    const parts = [renderDevices, renderQpTable, renderQpDetail, renderStepPanels, renderFaultForms,
      refreshLadderEndpoints];
    for (const part of parts) {
      try {
        part();
      } catch (error) {
        console.error(`uroce console: ${part.name} failed`, error);
      }
    }
  }

  function snapshotDevices() {
    return (state.snapshot && Array.isArray(state.snapshot.devices)) ? state.snapshot.devices : [];
  }

  function snapshotQps() {
    return (state.snapshot && Array.isArray(state.snapshot.qps)) ? state.snapshot.qps : [];
  }

  function deviceNamedAt(address) {
    const device = snapshotDevices().find((d) => d.address === address);
    return device ? device.name : null;
  }

  // Keeps one child per key in `container`, in order: reuses the existing
  // node (so focus, open <details> and scroll survive) and removes the rest.
  function syncKeyed(container, keys, create, update, keyAttr = 'device') {
    const existing = new Map();
    for (const child of [...container.children]) {
      if (child.dataset && child.dataset[keyAttr] !== undefined) existing.set(child.dataset[keyAttr], child);
      else child.remove();
    }
    let previous = null;
    for (const key of keys) {
      let node = existing.get(key);
      existing.delete(key);
      if (!node) node = create(key);
      update(node, key);
      const expectedPosition = previous ? previous.nextSibling : container.firstChild;
      if (node !== expectedPosition) container.insertBefore(node, expectedPosition);
      previous = node;
    }
    for (const node of existing.values()) node.remove();
  }

  // ------------------------------------------------------------- devices

  // What each counter counts, as the daemon's hello says (device/stats.h).
  function counterText(name) {
    const texts = (state.hello && state.hello.counters) || {};
    return texts[name] || '';
  }

  function renderDevices() {
    const container = $('#device-cards');
    const devices = snapshotDevices();
    if (devices.length === 0) {
      setChildren(container, el('p', { class: 'empty' }, 'The daemon has no devices.'));
      return;
    }
    const byName = new Map(devices.map((d) => [d.name, d]));
    syncKeyed(container, devices.map((d) => d.name),
      (name) => el('div', { class: 'card device-card', dataset: { device: name } }),
      (card, name) => fillDeviceCard(card, byName.get(name)));
  }

  // The card's parts are made once and then updated, so that a tooltip or
  // a click on "counters at 0" survives the next snapshot.
  function fillDeviceCard(card, device) {
    if (!card.firstChild) {
      card.append(el('div', { class: 'card-head' }), el('div', { class: 'device-facts' }),
        el('div', { class: 'counters' },
          el('table', { class: 'counter-table' },
            el('thead', null, el('tr', null, el('th', null, 'counter'), el('th', { class: 'num' }, 'value'),
              el('th', { class: 'num' }, 'per s'), el('th', null, 'last minute'))),
            el('tbody')),
          el('p', { class: 'empty all-zero' }, 'All counters are 0.'),
          el('details', { class: 'zero-counters' }, el('summary'), el('p', { class: 'zero-list' }))));
    }
    const portActive = /ACTIVE/i.test(String(device.port_state));
    const step = device.step || {};
    const heldCount = Array.isArray(step.held) ? step.held.length : 0;
    setChildren(card.querySelector('.card-head'),
      el('h3', null, device.name),
      el('span', { class: `badge ${portActive ? 'badge-good' : 'badge-bad'}`, title: 'port state' },
        String(device.port_state ?? 'unknown')),
      step.paused ? el('span', { class: 'badge badge-held', title: 'step mode holds its packets' },
        `wire paused, ${heldCount} held`) : null,
      faultsActive(device.faults) ? el('span', { class: 'badge badge-fault' }, 'faults on') : null);
    setChildren(card.querySelector('.device-facts'), factTable([
      ['address', el('code', null, fmtValue(device.address)), 'IPv4 address; RoCEv2 GIDs are made from it'],
      ['netdev', fmtValue(device.netdev), 'the network interface the device sits on'],
      ['max MTU', fmtValue(device.max_mtu), 'largest path MTU its QPs can use'],
      ['GIDs', gidList(device.gids), 'the GID table: the addresses QPs use on the wire'],
      ['clients', clientsText(device.clients), 'programs that opened the device'],
      ['objects', objectsText(device.objects), 'verbs objects alive on the device'],
      ['faults', faultsText(device.faults), 'as uroce fault'],
      ['step', step.paused ? `paused, ${heldCount} of at most ${fmtValue(step.max_held)} held` : 'running'],
    ]));
    fillCounters(card.querySelector('.counters'), device);
  }

  function gidList(gids) {
    if (!Array.isArray(gids) || gids.length === 0) return '–';
    return el('ol', { class: 'gid-list', start: '0' }, gids.map((g) => el('li', null, el('code', null, fmtValue(g)))));
  }

  function clientsText(clients) {
    if (Array.isArray(clients)) {
      if (clients.length === 0) return 'none';
      return `${clients.length}: ${clients.map((c) => (c && typeof c === 'object'
        ? [c.pid !== undefined ? `pid ${c.pid}` : '', c.comm || ''].filter(Boolean).join(' ') || fmtValue(c)
        : fmtValue(c))).join(', ')}`;
    }
    return fmtValue(clients);
  }

  function objectsText(objects) {
    if (!objects || typeof objects !== 'object') return fmtValue(objects);
    const parts = Object.entries(objects).filter(([, n]) => n !== 0).map(([k, n]) => `${k} ${fmtValue(n)}`);
    return parts.length ? parts.join(' · ') : 'none';
  }

  function faultsActive(faults) {
    return !!faults && ['drop', 'duplicate', 'reorder', 'delay_us'].some((k) => isNum(faults[k]) && faults[k] > 0);
  }

  function faultsText(faults) {
    if (!faults) return '–';
    if (!faultsActive(faults)) return 'none';
    return `drop ${fmtPercent(faults.drop)} · duplicate ${fmtPercent(faults.duplicate)} · reorder ${
      fmtPercent(faults.reorder)} · delay ${fmtInt(faults.delay_us)} µs`;
  }

  // Rates per second between consecutive snapshots.
  function counterRates(deviceName, counter) {
    const samples = state.history.get(deviceName) || [];
    const rates = [];
    for (let i = 1; i < samples.length; i++) {
      const dt = (samples[i].t - samples[i - 1].t) / 1000;
      const a = samples[i - 1].counters[counter];
      const b = samples[i].counters[counter];
      if (dt > 0 && isNum(a) && isNum(b)) rates.push(Math.max(0, (b - a) / dt));
    }
    return rates;
  }

  // Non-zero counters in a table, one row per counter (kept from one
  // snapshot to the next); the zero ones folded away.
  function fillCounters(block, device) {
    const counters = device.counters || {};
    const names = Object.keys(counters);
    const nonZero = names.filter((n) => counters[n] !== 0);
    const zero = names.filter((n) => counters[n] === 0);
    const table = block.querySelector('.counter-table');
    table.hidden = nonZero.length === 0;
    block.querySelector('.all-zero').hidden = nonZero.length > 0 || names.length === 0;
    syncKeyed(table.tBodies[0], nonZero,
      (name) => el('tr', { title: counterText(name), dataset: { counter: name } },
        el('th', { scope: 'row' }, el('code', null, name)),
        el('td', { class: 'num value' }), el('td', { class: 'num rate' }), el('td', { class: 'spark-cell' })),
      (row, name) => {
        const rates = counterRates(device.name, name);
        row.querySelector('.value').textContent = fmtInt(counters[name]);
        row.querySelector('.rate').textContent = rates.length ? fmtRate(rates[rates.length - 1]) : '–';
        setChildren(row.querySelector('.spark-cell'), sparkline(rates));
      }, 'counter');
    const details = block.querySelector('.zero-counters');
    details.hidden = zero.length === 0;
    details.querySelector('summary').textContent = `${zero.length} counters at 0`;
    setChildren(details.querySelector('.zero-list'), zero.map((n) => el('code', { title: counterText(n) }, n)));
  }

  // A small line plot of up to 60 rates, scaled to its own maximum.
  function sparkline(rates) {
    const width = 120;
    const height = 26;
    const box = svg('svg', { class: 'sparkline', width, height, viewBox: `0 0 ${width} ${height}`, 'aria-hidden': 'true' });
    if (rates.length < 2) return box;
    const max = Math.max(...rates, 1e-9);
    const step = width / (HISTORY_SAMPLES - 2);
    const x0 = width - step * (rates.length - 1);
    const points = rates.map((r, i) => `${(x0 + i * step).toFixed(1)},${(height - 2 - (r / max) * (height - 4)).toFixed(1)}`);
    box.append(
      svg('polygon', { class: 'spark-area', points: `${x0.toFixed(1)},${height} ${points.join(' ')} ${width},${height}` }),
      svg('polyline', { class: 'spark-line', points: points.join(' ') }),
      svg('title', null, `max ${fmtRate(max)}/s over the last ${rates.length} samples`));
    return box;
  }

  // --------------------------------------------------------------- QPs

  const qpKey = (qp) => `${qp.device}/${qp.qpn}`;

  function queueText(queue) {
    if (queue === null || queue === undefined) return '–';
    if (queue.srq !== undefined) return `srq ${queue.srq}`;
    return `${fmtValue(queue.queued)}/${fmtValue(queue.in_flight)}/${fmtValue(queue.completed)}`;
  }

  function timerText(timer) {
    if (!timer) return '–';
    const what = String(timer.for || 'timer').split(':')[0];
    return `${what} ${fmtAgo(timer.in_us)}`;
  }

  function nakOrErrorText(qp) {
    if (qp.last_error) return `ERR: ${qp.last_error.what}`;
    const nak = qp.last_nak;
    if (!nak) return '–';
    const what = nak.kind === 'RNR NAK' ? `RNR NAK (timer ${nak.rnr_timer})` : `NAK (${nak.code})`;
    return `${what} ${nak.direction} psn ${nak.psn}, ${fmtAgo(nak.in_us)}`;
  }

  // The columns of `uroce qp`, with what each means (shown on hover).
  const QP_COLUMNS = [
    ['Device', (q) => q.device, 'the device the QP lives on'],
    ['QPN', (q) => q.qpn, 'QP number: what packets name in the BTH\'s destination QP'],
    ['Type', (q) => q.type, 'RC reliable connected, UC unreliable connected, UD datagram, XRC, RAW_PACKET'],
    ['State', (q) => stateBadge(q), 'the state now, and the one it left last'],
    ['PID', (q) => q.pid, 'the process that created the QP'],
    ['Program', (q) => q.comm, 'its name'],
    ['Peer', (q) => (q.peer ? `${q.peer.address}/${q.peer.qpn}` : '–'), 'remote address and QPN (connected QPs, once in RTR)'],
    ['MTU', (q) => q.path_mtu ?? '–', 'path MTU: the largest payload of one packet'],
    ['SQ PSN', (q) => q.sq_psn, 'PSN of the next new request packet'],
    ['RQ PSN', (q) => q.expected_psn, 'PSN the responder expects next'],
    ['Unacked', (q) => (q.unacked ? q.unacked.count : '–'), 'PSNs sent and not acknowledged (at most 128)'],
    ['SQ q/f/c', (q) => queueText(q.send_queue), 'send queue: WQEs queued / in flight / completed'],
    ['RQ q/f/c', (q) => queueText(q.receive_queue), 'receive queue: queued / in flight / completed, or its SRQ'],
    ['RD/AT', (q) => (isNum(q.reads_outstanding) ? `${q.reads_outstanding}/${q.max_rd_atomic}` : '–'), 'READs and atomics outstanding / max_rd_atomic'],
    ['Retry/RNR', (q) => (isNum(q.retries_left) ? `${q.retries_left}/${q.rnr_retries_left}` : '–'), 'retries left of retry_cnt / RNR retries left of rnr_retry'],
    ['Timer', (q) => timerText(q.timer), 'the next timer: retransmit or RNR wait'],
    ['Last NAK or error', (q) => nakOrErrorText(q), 'why the QP entered ERR, else the last NAK it sent or received'],
  ];

  function stateBadge(qp) {
    return el('span', { class: `state-badge state-${String(qp.state).toLowerCase()}` },
      String(qp.state), qp.previous_state ? el('span', { class: 'from' }, ` < ${qp.previous_state}`) : null);
  }

  function renderQpTable() {
    const table = $('#qp-table');
    if (!table.tHead.rows.length) {
      table.tHead.append(el('tr', null, QP_COLUMNS.map(([title, , help]) => el('th', { scope: 'col', title: help }, title))));
    }
    const qps = snapshotQps();
    const byKey = new Map(qps.map((q) => [qpKey(q), q]));
    $('#qp-empty').hidden = qps.length > 0;
    syncKeyed(table.tBodies[0], qps.map(qpKey),
      (key) => {
        const row = el('tr', { class: 'qp-row', tabindex: '0', dataset: { key } });
        row.addEventListener('click', () => selectQp(key));
        row.addEventListener('keydown', (event) => {
          if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); selectQp(key); }
        });
        return row;
      },
      (row, key) => {
        const qp = byKey.get(key);
        row.dataset.device = qp.device;
        row.dataset.qpn = String(qp.qpn);
        row.dataset.state = String(qp.state);
        row.classList.toggle('selected', key === state.selectedQp);
        row.classList.toggle('in-error', qp.state === 'ERR');
        setChildren(row, ...QP_COLUMNS.map(([, cell]) => el('td', null, cell(qp))));
      }, 'key');
  }

  function selectQp(key) {
    state.selectedQp = key;
    for (const row of document.querySelectorAll('#qp-table tr.qp-row')) {
      row.classList.toggle('selected', row.dataset.key === key);
    }
    renderQpDetail();
    $('#qp-detail').scrollIntoView({ block: 'nearest' });
  }

  function renderQpDetail() {
    const detail = $('#qp-detail');
    if (!state.selectedQp) {
      detail.hidden = true;
      $('#qp-hint').hidden = false;
      return;
    }
    const current = snapshotQps().find((q) => qpKey(q) === state.selectedQp);
    if (current) state.lastQp = current;
    const qp = current || state.lastQp;
    if (!qp) return;
    $('#qp-hint').hidden = true;
    detail.hidden = false;
    if (detail.dataset.key !== state.selectedQp) buildQpDetail(detail, state.selectedQp);
    const part = (name) => detail.querySelector(`[data-part="${name}"]`);
    setChildren(part('head'),
      el('h3', null, `QP ${qp.device}/${qp.qpn}`),
      el('span', { class: 'badge' }, String(qp.type)),
      stateBadge(qp),
      el('span', { class: 'muted' }, `${qp.comm || '?'} (pid ${fmtValue(qp.pid)})`),
      current ? null : el('span', { class: 'badge badge-bad' }, 'destroyed: last seen values'));
    setChildren(part('diagram'), stateDiagram(qp));
    setChildren(part('transitions'), transitionsTable(qp));
    setChildren(part('rings'), queueRing('Send queue', qp.send_queue), queueRing('Receive queue', qp.receive_queue));
    setChildren(part('psn'), psnWindow(qp));
    setChildren(part('facts'), qpFacts(qp));
  }

  // The frame of the QP detail: made once per chosen QP, so that its Close
  // button and captions stay put while the parts are redrawn.
  function buildQpDetail(detail, key) {
    detail.dataset.key = key;
    setChildren(detail,
      el('div', { class: 'detail-head' },
        el('div', { class: 'detail-head-info', 'data-part': 'head' }),
        el('button', { type: 'button', class: 'button button-quiet close-detail', onclick: () => closeQpDetail() }, 'Close')),
      el('div', { class: 'qp-detail-grid' },
        el('div', { class: 'qp-detail-column' },
          el('div', { class: 'panel' },
            el('h4', null, 'State machine'),
            el('div', { 'data-part': 'diagram' }),
            el('p', { class: 'caption small' },
              'Edges: transitions the kernel\'s state table allows for this QP type; bold: taken by this QP ',
              '(the newest in blue); dashed: a move the table does not list (made by the device itself, e.g. to SQE). ',
              'The lit state is the current one, the dashed outline the one it left. Hover over a state for its meaning.')),
          el('div', { class: 'panel' }, el('h4', null, 'Transitions'), el('div', { 'data-part': 'transitions' }))),
        el('div', { class: 'qp-detail-column' },
          el('div', { class: 'panel' },
            el('h4', null, 'Work queues'),
            el('div', { class: 'rings', 'data-part': 'rings' }),
            el('p', { class: 'caption small' },
              'Each ring is the queue\'s slots. A WQE is queued (posted by the program, not yet taken), then in flight ',
              '(being sent or received), then completed; the ring\'s head moves on by one per completion.'),
            el('h4', null, 'PSN window'),
            el('div', { 'data-part': 'psn' })),
          el('div', { class: 'panel' }, el('h4', null, 'Attributes and timers'), el('div', { 'data-part': 'facts' })))));
  }

  function closeQpDetail() {
    delete $('#qp-detail').dataset.key;
    state.selectedQp = null;
    state.lastQp = null;
    for (const row of document.querySelectorAll('#qp-table tr.qp-row.selected')) row.classList.remove('selected');
    renderQpDetail();
  }

  function qpFacts(qp) {
    const nak = qp.last_nak;
    return factTable([
      ['port', fmtValue(qp.port)],
      ['peer', qp.peer ? `${qp.peer.address} QP ${qp.peer.qpn}` : '–', 'the remote address and QP (RC, UC, XRC once in RTR)'],
      ['path MTU', fmtValue(qp.path_mtu)],
      ['sq_psn', fmtValue(qp.sq_psn), 'the PSN of the next new request packet'],
      ['expected_psn', fmtValue(qp.expected_psn), 'the PSN the responder expects next'],
      isNum(qp.reads_outstanding) && ['READs/atomics outstanding', `${qp.reads_outstanding} of max_rd_atomic ${qp.max_rd_atomic}`],
      isNum(qp.responder_resources) && ['responder resources', `${qp.responder_resources} of max_dest_rd_atomic ${qp.max_dest_rd_atomic}`,
        'READs and atomics from the peer this QP is answering'],
      isNum(qp.retries_left) && ['retries left', `${qp.retries_left} of retry_cnt ${qp.retry_cnt}`,
        'retransmissions without an ACK before the QP fails with a retry-exceeded error'],
      qp.rnr_retries_left !== undefined && ['RNR retries left', `${fmtValue(qp.rnr_retries_left)} of rnr_retry ${fmtValue(qp.rnr_retry)}`,
        'how often the requester may resend after an RNR NAK (7: forever)'],
      isNum(qp.timeout) && ['timeout', qp.timeout === 0 ? '0 (no retransmit timer)'
        : `${qp.timeout} (4.096 µs × 2^${qp.timeout} = ${fmtDurationUs(4.096 * 2 ** qp.timeout)})`,
      'local ACK timeout: how long the requester waits for an ACK before retransmitting'],
      isNum(qp.min_rnr_timer) && ['min_rnr_timer', `${qp.min_rnr_timer} (${fmtDurationUs(wire().rnr_timer_us[qp.min_rnr_timer & 31])})`,
        'the wait this QP asks for in its RNR NAKs'],
      ['next timer', qp.timer ? `${qp.timer.for} — ${fmtAgo(qp.timer.in_us)}` : 'none'],
      ['last NAK', nak ? `${nak.kind} ${nak.direction}, psn ${nak.psn}${nak.kind === 'NAK' ? `, ${nak.code}` : `, timer ${nak.rnr_timer}`}, ${fmtAgo(nak.in_us)}` : 'none'],
      ['last error', qp.last_error ? `${qp.last_error.what}, ${fmtAgo(qp.last_error.in_us)}` : 'none'],
    ]);
  }

  function transitionsTable(qp) {
    const transitions = Array.isArray(qp.transitions) ? qp.transitions : [];
    if (!transitions.length) return el('p', { class: 'empty' }, 'No transitions yet.');
    const total = isNum(qp.transition_count) ? qp.transition_count : transitions.length;
    return el('div', null,
      el('p', { class: 'caption small' }, total > transitions.length
        ? `The newest ${transitions.length} of ${total}, newest last.` : `${total}, newest last.`),
      el('table', { class: 'transitions' },
        el('thead', null, el('tr', null, ['when', 'from → to', 'cause', 'attributes set'].map((h) => el('th', null, h)))),
        el('tbody', null, transitions.map((t) => el('tr', null,
          el('td', { class: 'nowrap' }, fmtAgo(t.in_us), el('br'), el('span', { class: 'muted small' }, fmtClock(t.unix_ms))),
          el('td', { class: 'nowrap' }, `${t.from} → ${t.to}`),
          el('td', null, fmtValue(t.cause)),
          el('td', null, attrChips(t.attrs, t.attr_mask)))))));
  }

  function attrChips(attrs, mask) {
    const names = String(attrs || '').split('|').filter((s) => s && s !== '0');
    if (!names.length) return el('span', { class: 'muted' }, '–');
    return el('span', { class: 'chips', title: `attr_mask ${mask} (${fmtHex(mask)})` },
      names.map((n) => el('span', { class: 'chip', title: n }, n.replace(/^IBV_QP_/, ''))));
  }

  // ----------------------------------------------------- state diagram

  // Where each IBA state sits: the path to RTS left to right, SQD beside RTS,
  // SQE under it, ERR below, so that "any state -> ERR" fans into it from
  // above and "any state -> RESET" arcs back over the top.
  const STATE_POSITIONS = {
    RESET: [80, 170], INIT: [230, 170], RTR: [380, 170], RTS: [530, 170], SQD: [690, 170],
    SQE: [690, 320], ERR: [400, 330],
  };
  // Angle (degrees, 0 = right, 90 = down) of each state's self loop, where no
  // other edge leaves.
  const SELF_LOOP_ANGLE = { RESET: 180, INIT: 120, RTR: 60, RTS: -55, SQD: 0, SQE: 0, ERR: 90 };
  const NODE_W = 84;
  const NODE_H = 40;

  function statePositions(states) {
    const positions = {};
    let extra = 0;
    for (const s of states) {
      positions[s] = STATE_POSITIONS[s] || [80 + 150 * extra++, 420];  // a state this page does not know
    }
    return positions;
  }

  // The point where a ray from the node's centre in direction (ux, uy)
  // leaves its rectangle.
  function nodeExit([cx, cy], ux, uy) {
    const tx = ux !== 0 ? (NODE_W / 2 + 2) / Math.abs(ux) : Infinity;
    const ty = uy !== 0 ? (NODE_H / 2 + 2) / Math.abs(uy) : Infinity;
    const t = Math.min(tx, ty);
    return [cx + ux * t, cy + uy * t];
  }

  function edgePath(from, to, a, b, bothWays) {
    if (from === to) {
      // A loop leaving and re-entering the node around `angle`, reaching
      // about 40 units beyond its border whatever side that is.
      const angle = (SELF_LOOP_ANGLE[from] ?? -90) * Math.PI / 180;
      const spread = 0.35;
      const [sx, sy] = nodeExit(a, Math.cos(angle - spread), Math.sin(angle - spread));
      const [ex, ey] = nodeExit(a, Math.cos(angle + spread), Math.sin(angle + spread));
      const border = Math.hypot(...nodeExit([0, 0], Math.cos(angle), Math.sin(angle)));
      const reach = border + 56;
      const c1 = [a[0] + Math.cos(angle - 0.5) * reach, a[1] + Math.sin(angle - 0.5) * reach];
      const c2 = [a[0] + Math.cos(angle + 0.5) * reach, a[1] + Math.sin(angle + 0.5) * reach];
      return `M${sx.toFixed(1)},${sy.toFixed(1)} C${c1[0].toFixed(1)},${c1[1].toFixed(1)} ${c2[0].toFixed(1)},${c2[1].toFixed(1)} ${ex.toFixed(1)},${ey.toFixed(1)}`;
    }
    const dx = b[0] - a[0];
    const dy = b[1] - a[1];
    const len = Math.hypot(dx, dy);
    let control = [(a[0] + b[0]) / 2, (a[1] + b[1]) / 2];
    if (to === 'RESET' && Math.abs(dy) < 1) {
      // Back to RESET along the row: arc over the states in between.
      control = [control[0], a[1] - 0.36 * Math.abs(dx)];
    } else if (bothWays) {
      // A pair of opposite edges: each bends to its own left.
      control = [control[0] + (dy / len) * 26, control[1] - (dx / len) * 26];
    }
    const [sx, sy] = nodeExit(a, ...unit(control[0] - a[0], control[1] - a[1]));
    const [ex, ey] = nodeExit(b, ...unit(control[0] - b[0], control[1] - b[1]));
    return `M${sx.toFixed(1)},${sy.toFixed(1)} Q${control[0].toFixed(1)},${control[1].toFixed(1)} ${ex.toFixed(1)},${ey.toFixed(1)}`;
  }

  function unit(x, y) {
    const len = Math.hypot(x, y) || 1;
    return [x / len, y / len];
  }

  // hello.transitions[type] as [from, to] pairs (a pair may also come as
  // {from, to}).
  function allowedTransitions(hello, type) {
    const list = hello.transitions && hello.transitions[type];
    if (!Array.isArray(list)) return [];
    return list.map((t) => (Array.isArray(t) ? [t[0], t[1]] : t && typeof t === 'object' ? [t.from, t.to] : null))
      .filter((t) => t && typeof t[0] === 'string' && typeof t[1] === 'string');
  }

  function stateDiagram(qp) {
    const hello = state.hello || {};
    const states = Array.isArray(hello.states) && hello.states.length
      ? hello.states : ['RESET', 'INIT', 'RTR', 'RTS', 'SQD', 'SQE', 'ERR'];
    const allowed = allowedTransitions(hello, qp.type);
    const taken = Array.isArray(qp.transitions) ? qp.transitions : [];
    const takenPairs = new Set(taken.map((t) => `${t.from}>${t.to}`));
    const latest = taken.length ? `${taken[taken.length - 1].from}>${taken[taken.length - 1].to}` : null;
    const visited = new Set(taken.flatMap((t) => [t.from, t.to]));
    const positions = statePositions(states);
    const pairs = new Map();
    for (const [from, to] of allowed) pairs.set(`${from}>${to}`, { from, to, allowed: true });
    for (const t of taken) {
      if (!pairs.has(`${t.from}>${t.to}`)) pairs.set(`${t.from}>${t.to}`, { from: t.from, to: t.to, allowed: false });
    }
    const height = states.some((s) => !STATE_POSITIONS[s]) ? 470 : 390;
    const diagram = svg('svg', {
      id: 'state-diagram', viewBox: `0 0 780 ${height}`, role: 'img',
      'aria-label': `State diagram of ${qp.type} QPs; this QP is in ${qp.state}`,
    });
    diagram.append(svg('defs', null,
      arrowMarker('sd-arrow', 'sd-arrowhead'), arrowMarker('sd-arrow-taken', 'sd-arrowhead taken')));
    const edges = svg('g', { class: 'edges' });
    const takenEdges = svg('g', { class: 'edges-taken' });  // drawn last, on top
    for (const { from, to, allowed: inTable } of pairs.values()) {
      const a = positions[from];
      const b = positions[to];
      if (!a || !b) continue;
      const key = `${from}>${to}`;
      const wasTaken = takenPairs.has(key);
      const classes = ['edge', wasTaken && 'taken', key === latest && 'latest', !inTable && 'not-in-table'].filter(Boolean).join(' ');
      const path = svg('path', {
        class: classes, d: edgePath(from, to, a, b, pairs.has(`${to}>${from}`) && from !== to),
        'data-from': from, 'data-to': to,
        'marker-end': wasTaken ? 'url(#sd-arrow-taken)' : 'url(#sd-arrow)',
      }, svg('title', null, `${from} → ${to}${wasTaken ? ' (taken by this QP)' : ''}${inTable ? '' : ' (not in the kernel\'s table)'}`));
      (wasTaken ? takenEdges : edges).append(path);
    }
    diagram.append(edges, takenEdges);
    for (const s of states) {
      const [x, y] = positions[s];
      const classes = ['state-node', s === qp.state && 'current', s === qp.previous_state && 'previous',
        visited.has(s) && 'visited'].filter(Boolean).join(' ');
      diagram.append(svg('g', { class: classes, 'data-state': s, transform: `translate(${x},${y})` },
        svg('rect', { x: -NODE_W / 2, y: -NODE_H / 2, width: NODE_W, height: NODE_H, rx: 10 }),
        svg('text', { 'text-anchor': 'middle', dy: '0.35em' }, s),
        svg('title', null, STATE_HELP[s] || s)));
    }
    if (!allowed.length) {
      diagram.append(svg('text', { x: 20, y: 24, class: 'sd-note' },
        `No transition table for type ${qp.type}: only the transitions it took are drawn.`));
    }
    return diagram;
  }

  const STATE_HELP = {
    RESET: 'RESET: just created, or reset; holds no state',
    INIT: 'INIT: port, P_Key and access flags set; receives may be posted',
    RTR: 'RTR, ready to receive: peer, path MTU and expected PSN set',
    RTS: 'RTS, ready to send: timeouts, retries and send PSN set; both directions work',
    SQD: 'SQD, send queue drained: no new send WQEs start',
    SQE: 'SQE, send queue error: a send failed; receives still work (UC, UD)',
    ERR: 'ERR: every outstanding WQE completes with a flush error',
  };

  function arrowMarker(id, className) {
    return svg('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M0,0 L10,5 L0,10 z', class: className }));
  }

  // ------------------------------------------------------- queue rings

  function queueRing(title, queue) {
    const box = el('figure', { class: 'ring' }, el('figcaption', null, title));
    if (queue === null || queue === undefined) {
      box.append(el('p', { class: 'empty' }, 'none'));
      return box;
    }
    if (queue.srq !== undefined) {
      box.append(el('p', { class: 'ring-srq' }, `receives come from SRQ ${queue.srq}`,
        el('br'), el('span', { class: 'muted small' }, 'a shared receive queue, which several QPs take from')));
      return box;
    }
    const size = Math.max(0, queue.size | 0);
    const queued = Math.max(0, queue.queued | 0);
    const inFlight = Math.max(0, queue.in_flight | 0);
    const completed = isNum(queue.completed) ? queue.completed : 0;
    const head = size ? completed % size : 0;
    const r = 46;
    const c = 2 * Math.PI * r;
    const ring = svg('svg', { class: 'ring-svg', viewBox: '0 0 140 140', width: 140, height: 140, role: 'img',
      'aria-label': `${title}: ${queued} queued, ${inFlight} in flight, ${completed} completed, ${size} slots` });
    ring.append(svg('circle', { cx: 70, cy: 70, r, class: 'ring-free' }));
    // Arcs start at the head (the oldest WQE not completed): in flight, then queued.
    const arc = (start, count, className) => {
      if (!size || count <= 0) return null;
      const length = c * Math.min(count, size) / size;
      return svg('circle', { cx: 70, cy: 70, r, class: className,
        'stroke-dasharray': `${length.toFixed(2)} ${c.toFixed(2)}`,
        transform: `rotate(${(-90 + 360 * start / size).toFixed(2)} 70 70)` });
    };
    ring.append(arc(head, inFlight, 'ring-inflight'), arc(head + inFlight, queued, 'ring-queued'));
    if (size) {
      const angle = (-90 + 360 * head / size) * Math.PI / 180;
      ring.append(svg('line', { class: 'ring-head', x1: 70 + Math.cos(angle) * (r - 14), y1: 70 + Math.sin(angle) * (r - 14),
        x2: 70 + Math.cos(angle) * (r + 14), y2: 70 + Math.sin(angle) * (r + 14) }));
    }
    ring.append(
      svg('text', { x: 70, y: 64, class: 'ring-big', 'text-anchor': 'middle' }, `${queued + inFlight}/${size}`),
      svg('text', { x: 70, y: 82, class: 'ring-small', 'text-anchor': 'middle' }, 'slots used'));
    box.append(ring, el('ul', { class: 'ring-legend' },
      el('li', null, el('span', { class: 'swatch swatch-queued' }), `${fmtInt(queued)} queued`),
      el('li', null, el('span', { class: 'swatch swatch-inflight' }), `${fmtInt(inFlight)} in flight`),
      el('li', null, el('span', { class: 'swatch swatch-free' }), `${fmtInt(Math.max(0, size - queued - inFlight))} free`),
      el('li', null, el('span', { class: 'swatch swatch-head' }),
        `${fmtInt(completed)} completed (head at slot ${head})`)));
    return box;
  }

  // --------------------------------------------------------- PSN window

  function psnWindow(qp) {
    const box = el('div', { class: 'psn-window' });
    const width = 520;
    const unacked = qp.unacked;
    const drawing = svg('svg', { class: 'psn-svg', viewBox: `0 0 ${width} 86`, role: 'img',
      'aria-label': 'the requester\'s window of unacknowledged PSNs' });
    const left = 20;
    const barWidth = 400;
    const cap = 128;  // the most PSNs the requester has unacknowledged
    drawing.append(svg('rect', { x: left, y: 22, width: barWidth, height: 24, class: 'psn-frame', rx: 3 }));
    if (unacked) {
      const count = Math.max(0, unacked.count | 0);
      const fill = Math.max(count ? 4 : 0, barWidth * Math.min(count, cap) / cap);
      drawing.append(
        svg('rect', { x: left, y: 22, width: fill, height: 24, class: 'psn-unacked', rx: 3 }),
        svg('text', { x: left, y: 14, class: 'psn-label' }, `first unacked ${unacked.first}`),
        svg('text', { x: left + fill, y: 64, class: 'psn-label',
          'text-anchor': fill < 90 ? 'start' : fill > barWidth - 90 ? 'end' : 'middle' }, `sq_psn ${qp.sq_psn} (next new)`),
        svg('line', { x1: left + fill, y1: 18, x2: left + fill, y2: 52, class: 'psn-next' }),
        svg('text', { x: left + barWidth + 8, y: 39, class: 'psn-count' }, `${count} of ${cap}`),
        svg('text', { x: left + 6, y: 80, class: 'psn-note' },
          count ? `PSNs ${unacked.first} … ${psnAdd(unacked.end, -1)} sent, waiting for an ACK` : 'everything sent is acknowledged'));
    } else {
      drawing.append(
        svg('text', { x: left + 8, y: 39, class: 'psn-note' }, `sq_psn ${fmtValue(qp.sq_psn)}: the next request PSN`),
        svg('text', { x: left + 6, y: 80, class: 'psn-note' }, 'no window: the QP is not a reliable one in RTS'));
    }
    box.append(drawing, el('p', { class: 'psn-responder' },
      el('b', null, `expected_psn ${fmtValue(qp.expected_psn)}`),
      ': the next PSN this QP accepts from its peer. An older PSN is a duplicate (answered again, not executed ',
      'again); a newer one means packets were lost (the responder NAKs it with a PSN sequence error).'));
    return box;
  }

  const psnAdd = (psn, n) => (((psn + n) % 0x1000000) + 0x1000000) % 0x1000000;

  // ------------------------------------------------------------ ladder

  const ROW_H = 34;
  const TOP_PAD = 8;
  const GUTTER = 120;
  const COLUMN_MIN = 150;
  const SLANT = 10;       // an arrow drops this much: packets take time to cross
  const STUB = 46;        // length of a held packet's stub

  function scheduleLadderDraw() {
    const ladder = state.ladder;
    updateLadderCount();
    if (ladder.paused && !state.replay) return;
    if (ladder.timer) return;
    const wait = Math.max(0, ladder.lastDraw + LADDER_MIN_INTERVAL_MS - performance.now());
    ladder.timer = setTimeout(() => {
      ladder.timer = null;
      ladder.lastDraw = performance.now();
      drawLadder();
    }, wait);
  }

  function ladderWindow() {
    if (state.replay) {
      const { entries, end } = state.replay;
      return entries.slice(Math.max(0, end - LADDER_MAX_DRAWN), end);
    }
    return state.live.slice(-LADDER_MAX_DRAWN);
  }

  function updateLadderCount() {
    const count = $('#ladder-count');
    if (state.replay) {
      count.textContent = '';
      return;
    }
    const drawn = Math.min(state.live.length, LADDER_MAX_DRAWN);
    const received = state.received > state.live.length
      ? `${fmtInt(state.received)} packets received (the newest ${fmtInt(state.live.length)} kept)`
      : `${fmtInt(state.received)} packets received`;
    count.textContent = state.ladder.paused
      ? `Drawing paused: ${received}; the ladder stays as it was.`
      : `${received}; the newest ${fmtInt(drawn)} drawn.`;
  }

  // An endpoint is a device and a QP number: "uroce0/17".
  function endpointsOf(rec) {
    const srcDevice = rec.device || rec.src || '?';
    const srcQp = isNum(rec.src_qp) ? rec.src_qp : '?';
    const dstDevice = deviceNamedAt(rec.dst) || rec.dst || '?';
    const dstQp = rec.packet && isNum(rec.packet.dest_qp) ? rec.packet.dest_qp : '?';
    return {
      src: { key: `${srcDevice}/${srcQp}`, device: srcDevice, qpn: srcQp },
      dst: { key: `${dstDevice}/${dstQp}`, device: dstDevice, qpn: dstQp },
    };
  }

  // Devices left to right; inside every second device the QPs go in
  // reverse, so that with two devices the connected QPs meet in the middle
  // (uroce0/1 uroce0/17 | uroce1/18 uroce1/1) and their arrows stay short.
  function orderEndpoints(endpoints) {
    const deviceOrder = new Map(snapshotDevices().map((d, i) => [d.name, i]));
    const devices = [...new Set([...endpoints.values()].map((e) => e.device))].sort((a, b) => {
      const da = deviceOrder.has(a) ? deviceOrder.get(a) : 1e6;
      const db = deviceOrder.has(b) ? deviceOrder.get(b) : 1e6;
      return da !== db ? da - db : (a < b ? -1 : a > b ? 1 : 0);
    });
    const rank = new Map(devices.map((d, i) => [d, i]));
    return [...endpoints.values()].sort((a, b) => {
      const ra = rank.get(a.device);
      const rb = rank.get(b.device);
      if (ra !== rb) return ra - rb;
      const qa = isNum(a.qpn) ? a.qpn : Infinity;
      const qb = isNum(b.qpn) ? b.qpn : Infinity;
      if (qa === qb) return 0;
      return (qa < qb ? -1 : 1) * (ra % 2 ? -1 : 1);
    });
  }

  // Keeps a label inside the drawing: the label starts at x ('start'),
  // ends there ('end') or is centred on it ('middle'), then slides back in
  // when it would run past an edge.
  const LABEL_CHAR_W = 7.6;  // 12.5px monospace
  function placeLabel(x, anchor, text, width) {
    const w = text.length * LABEL_CHAR_W;
    const min = GUTTER - 24;
    const max = width - 6;
    let left = anchor === 'start' ? x : anchor === 'end' ? x - w : x - w / 2;
    left = Math.max(min, Math.min(left, max - w));
    return { x: left, anchor: 'start' };
  }

  function labelText(x, y, anchor, text, width) {
    const at = placeLabel(x, anchor, text, width);
    return svg('text', { class: 'packet-label', x: at.x.toFixed(1), y, 'text-anchor': at.anchor }, text);
  }

  // Redraws the ladder from scratch: at most LADDER_MAX_DRAWN packets every
  // LADDER_MIN_INTERVAL_MS is cheap, and it keeps the layout simple when a
  // new QP appears and every lifeline moves.
  function drawLadder() {
    const container = $('#ladder');
    const ladder = state.ladder;
    const source = state.replay ? 'replay' : 'live';
    const entries = ladderWindow();
    const previous = ladder.drawn;
    const sameSource = ladder.source === source;
    ladder.drawn = entries;
    ladder.source = source;
    updateLadderCount();

    if (!entries.length) {
      setChildren(container, el('p', { class: 'empty ladder-empty' },
        state.replay ? 'The file has no RoCEv2 packets.'
          : 'No packets yet. Run a program on the devices (for example uroce exec -- ib_send_lat -d uroce0 …) and its packets appear here.'));
      return;
    }

    const ends = entries.map((entry) => endpointsOf(entry.rec));
    const endpoints = new Map();
    for (const { src, dst } of ends) {
      if (!endpoints.has(src.key)) endpoints.set(src.key, src);
      if (!endpoints.has(dst.key)) endpoints.set(dst.key, dst);
    }
    const ordered = orderEndpoints(endpoints);
    const available = Math.max(600, container.clientWidth - 4);
    const column = Math.max(COLUMN_MIN, (available - GUTTER) / ordered.length);
    const width = Math.ceil(GUTTER + column * ordered.length);
    const height = TOP_PAD * 2 + entries.length * ROW_H;
    const xOf = new Map(ordered.map((e, i) => [e.key, GUTTER + column * (i + 0.5)]));

    const drawing = svg('svg', { id: 'ladder-svg', class: 'ladder-svg', width, height, viewBox: `0 0 ${width} ${height}` });
    drawing.append(ladderDefs());
    const lifelines = svg('g', { class: 'lifelines' });
    for (const e of ordered) {
      const x = xOf.get(e.key);
      lifelines.append(svg('line', { class: 'lifeline', x1: x, y1: 0, x2: x, y2: height, 'data-endpoint': e.key }));
    }
    drawing.append(lifelines);
    drawing.append(waitLines(entries, ends, xOf));

    const packets = svg('g', { class: 'packets' });
    let previousT = null;
    entries.forEach((entry, i) => {
      const y = TOP_PAD + i * ROW_H;
      packets.append(timeLabel(entry.rec.t_us, previousT, y));
      previousT = entry.rec.t_us;
      packets.append(ladderPacket(entry, ends[i], xOf, y, width));
    });
    drawing.append(packets);

    setChildren(container, ladderHead(ordered, xOf, width, column), drawing);
    restoreLadderScroll(container, previous, entries, sameSource);
  }

  function restoreLadderScroll(container, previous, entries, sameSource) {
    const ladder = state.ladder;
    if (!sameSource) {
      ladder.stick = !state.replay;
      container.scrollTop = state.replay ? 0 : container.scrollHeight;
      return;
    }
    if (ladder.stick) {
      container.scrollTop = container.scrollHeight;
      return;
    }
    // The reader scrolled up: keep the same packets in view while old ones
    // leave the top.
    if (previous.length && entries.length) {
      const firstSeq = entries[0].seq;
      let removed = 0;
      for (const entry of previous) {
        if (entry.seq < firstSeq) removed += 1; else break;
      }
      container.scrollTop = Math.max(0, container.scrollTop - removed * ROW_H);
    }
  }

  function ladderDefs() {
    return svg('defs', null, ['request', 'response', 'nak', 'malformed', 'other', 'retx'].map((kind) =>
      svg('marker', { id: `lad-arrow-${kind}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 8, markerHeight: 8,
        markerUnits: 'userSpaceOnUse', orient: 'auto' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: `lad-head lad-head-${kind}` }))));
  }

  // Endpoint names at the top; `position: sticky` keeps them in view.
  function ladderHead(ordered, xOf, width, column) {
    const labelWidth = Math.min(260, column - 8);
    const head = el('div', { class: 'ladder-head', style: `width:${width}px` },
      el('div', { class: 'ladder-head-gutter' }, 'time (s)'));
    const qps = new Map(snapshotQps().map((q) => [qpKey(q), q]));
    const devices = new Map(snapshotDevices().map((d) => [d.name, d]));
    for (const e of ordered) {
      const qp = qps.get(e.key);
      const device = devices.get(e.device);
      const sub = [device && device.address, qp && qp.type, qp && qp.comm].filter(Boolean).join(' · ');
      head.append(el('div', {
        class: 'endpoint-label', 'data-endpoint': e.key, title: [e.key, sub].filter(Boolean).join(': '),
        style: `left:${(xOf.get(e.key) - labelWidth / 2).toFixed(1)}px;width:${labelWidth.toFixed(1)}px`,
      },
        el('span', { class: 'endpoint-name' }, e.key),
        el('span', { class: 'endpoint-sub' }, sub || (isNum(e.qpn) && e.qpn === 1 ? 'QP1: connection manager' : ''))));
    }
    return head;
  }

  function timeLabel(tUs, previousT, y) {
    const seconds = isNum(tUs) ? (tUs / 1e6).toFixed(4) : '?';
    const gap = isNum(tUs) && isNum(previousT) ? tUs - previousT : 0;
    const label = svg('text', { class: 'time-label', x: 8, y: y + 22 }, seconds);
    // Long gaps are where timers fired (retransmit, RNR wait): show them.
    if (gap >= 10000) {
      label.append(svg('tspan', { class: 'time-gap', dx: 6 }, `+${fmtDurationUs(gap)}`));
    }
    return label;
  }

  // For each release, a dashed line down the sender's lifeline from where
  // the packet was held: how long it waited.
  function waitLines(entries, ends, xOf) {
    const group = svg('g', { class: 'wait-lines' });
    const heldRow = new Map();
    entries.forEach((entry, i) => {
      const rec = entry.rec;
      const key = `${rec.device}#${rec.step_id}`;
      if (rec.fate === 'held') heldRow.set(key, i);
      if (rec.fate === 'released' && heldRow.has(key)) {
        const x = xOf.get(ends[i].src.key) + 5 * Math.sign((xOf.get(ends[i].dst.key) - xOf.get(ends[i].src.key)) || 1);
        group.append(svg('line', { class: 'wait-line', x1: x, x2: x,
          y1: TOP_PAD + heldRow.get(key) * ROW_H + 18, y2: TOP_PAD + i * ROW_H + 18 }));
      }
    });
    return group;
  }

  function ladderPacket(entry, ends, xOf, y, width) {
    const rec = entry.rec;
    const fate = String(rec.fate || 'sent');
    const xs = xOf.get(ends.src.key);
    const xd = xOf.get(ends.dst.key);
    const dir = xd >= xs ? 1 : -1;
    const y1 = y + 18;
    const y2 = y1 + SLANT;
    const kind = entry.retx ? 'retx' : entry.kind;
    const classes = ['ladder-packet', fate, `kind-${entry.kind}`, entry.retx && 'retransmission',
      entry.seq === state.ladder.selectedSeq && 'selected'].filter(Boolean).join(' ');
    const group = svg('g', { class: classes, 'data-seq': entry.seq, 'data-fate': fate, tabindex: '0' });
    const label = (entry.retx ? '↻ ' : '') + entry.label;
    const title = `#${entry.seq} · ${fate}${entry.retx ? ' · retransmission/duplicate' : ''}\n${ends.src.key} → ${ends.dst.key}\n${label}`;
    group.append(svg('title', null, title));
    // A generous invisible target, so a thin arrow is easy to click.
    const span = Math.max(Math.abs(xd - xs), STUB + 150);
    const hitX = dir > 0 ? xs - 8 : xs - span - 8;
    group.append(svg('rect', { class: 'hit', x: hitX, y, width: span + 16, height: ROW_H }));

    if (fate === 'held' || fate === 'released') {
      const end = xs + dir * STUB;
      group.append(svg('line', { class: 'stub', x1: xs, y1, x2: end, y2: y1 }));
      if (fate === 'held') {
        group.append(svg('rect', { class: 'held-box', x: end - 6, y: y1 - 6, width: 12, height: 12, rx: 2 }));
      } else {
        group.append(svg('path', { class: 'release-mark', d: `M${end},${y1 - 6} L${end + dir * 10},${y1} L${end},${y1 + 6} z` }));
      }
      const text = fate === 'held' ? `held #${rec.step_id ?? '?'}: ${label}` : `released #${rec.step_id ?? '?'} (goes on below)`;
      group.append(labelText(xs + dir * 4, y1 - 5, dir > 0 ? 'start' : 'end', text, width));
      return group;
    }

    if (xs === xd) {
      // A QP sending to itself: a small loop.
      group.append(svg('path', { class: 'arrow', d: `M${xs},${y1} h40 v${SLANT} h-36`, 'marker-end': `url(#lad-arrow-${kind})` }));
      group.append(labelText(xs + 48, y1 + 6, 'start', label, width));
      return group;
    }

    const midX = (xs + xd) / 2;
    if (fate === 'lost') {
      const endX = xs + (xd - xs) * 0.55;
      const endY = y1 + SLANT * 0.55;
      group.append(svg('line', { class: 'arrow', x1: xs, y1, x2: endX, y2: endY }));
      group.append(svg('path', { class: 'lost-x', d: `M${endX - 7},${endY - 7} L${endX + 7},${endY + 7} M${endX + 7},${endY - 7} L${endX - 7},${endY + 7}` }));
      group.append(labelText((xs + endX) / 2, y1 - 5, 'middle', `${label} · lost`, width));
      return group;
    }
    group.append(svg('line', { class: 'arrow', x1: xs, y1, x2: xd - dir * 1, y2, 'marker-end': `url(#lad-arrow-${kind})` }));
    group.append(labelText(midX, y1 - 4, 'middle', label, width));
    return group;
  }

  // A snapshot can name devices the ladder drew as bare addresses (packets
  // arrived first): redraw once it does.
  let knownAddresses = '';
  function refreshLadderEndpoints() {
    const addresses = snapshotDevices().map((d) => `${d.name}=${d.address}`).join(',');
    if (addresses !== knownAddresses) {
      knownAddresses = addresses;
      scheduleLadderDraw();
    }
  }

  function onLadderClick(event) {
    const group = event.target.closest && event.target.closest('g.ladder-packet');
    if (!group) return;
    selectPacket(Number(group.dataset.seq));
  }

  function selectPacket(seq) {
    const entry = state.ladder.drawn.find((e) => e.seq === seq);
    if (!entry) return;
    state.ladder.selectedSeq = seq;
    for (const g of document.querySelectorAll('#ladder g.ladder-packet.selected')) g.classList.remove('selected');
    const group = document.querySelector(`#ladder g.ladder-packet[data-seq="${seq}"]`);
    if (group) group.classList.add('selected');
    showPacketDetail(entry);
  }

  function toggleLadderPause() {
    const ladder = state.ladder;
    ladder.paused = !ladder.paused;
    const button = $('#ladder-pause');
    button.textContent = ladder.paused ? 'Resume drawing' : 'Pause drawing';
    button.setAttribute('aria-pressed', String(ladder.paused));
    button.classList.toggle('active', ladder.paused);
    if (!ladder.paused) ladder.stick = true;
    scheduleLadderDraw();
  }

  function clearLadder() {
    state.live = [];
    state.received = 0;
    state.tracker = new RetransmissionTracker();
    state.missed = 0;
    state.ladder.selectedSeq = null;
    updateMissed();
    updateRecordingInfo();
    $('#ladder-note').textContent = '';
    $('#packet-detail').hidden = true;
    $('#packet-hint').hidden = false;
    if (state.replay) return;
    scheduleLadderDraw();
  }

  // ------------------------------------------------------- packet detail

  const FATE_TEXT = {
    sent: 'sent: it went onto the wire',
    lost: 'lost: dropped by fault injection, or by a drop in step mode',
    held: 'held: the sender\'s wire is paused (step mode); it waits there',
    released: 'released: step mode let it go; the next record of the sender shows where it went',
  };

  function showPacketDetail(entry) {
    const rec = entry.rec;
    const packet = rec.packet || {};
    const ends = endpointsOf(rec);
    const detail = $('#packet-detail');
    $('#packet-hint').hidden = true;
    detail.hidden = false;
    const headers = packet.headers && typeof packet.headers === 'object' ? packet.headers : {};
    const bytes = hexToBytes(packet.bytes || '');
    const total = isNum(packet.bytes_total) ? packet.bytes_total : bytes.length;
    setChildren(detail,
      el('div', { class: 'detail-head' },
        el('h3', null, packet.error ? 'Malformed packet' : String(packet.opcode)),
        el('span', { class: `badge fate-${rec.fate}` }, String(rec.fate)),
        entry.retx ? el('span', { class: 'badge badge-retx', title: 'its sender already sent this opcode and PSN' }, '↻ retransmission') : null),
      el('p', { class: 'packet-summary' }, entry.label),
      el('h4', null, 'Record'),
      factTable([
        ['seq', String(rec.seq)],
        ['time', isNum(rec.t_us) ? `${(rec.t_us / 1e6).toFixed(6)} s` : '–', state.replay ? 'since the first packet of the file' : 'since the console started'],
        ['fate', FATE_TEXT[rec.fate] || String(rec.fate)],
        ['from', `${ends.src.key} (${rec.src})`],
        ['to', `${ends.dst.key} (${rec.dst})`],
        rec.step_id ? ['step id', String(rec.step_id), 'the held packet\'s id in its device\'s step mode'] : null,
        packet.error ? ['error', packet.error] : null,
      ]),
      el('h4', null, 'IPv4 and UDP'),
      el('p', { class: 'caption small' }, 'RoCEv2 rides in UDP: the BTH below starts the UDP payload.'),
      factTable([
        ['IPv4 source', String(rec.src)],
        ['IPv4 destination', String(rec.dst)],
        ['protocol', '17 (UDP)'],
        ['UDP source port', fmtValue(rec.src_port), 'RoCEv2 uses it for entropy (ECMP), not to find the QP'],
        ['UDP destination port', isNum(rec.dst_port) ? String(rec.dst_port) : `${ROCE_PORT} (RoCEv2)`],
        ['UDP payload', `${fmtInt(total)} bytes`],
      ]),
      orderedHeaders(headers).map(([name, fields]) => headerBlock(name, fields)),
      isNum(packet.payload_bytes) ? el('p', { class: 'small' }, `Payload: ${fmtInt(packet.payload_bytes)} bytes, then ${
        headers.BTH && isNum(headers.BTH.pad) ? headers.BTH.pad : 0} pad bytes and the 4-byte ICRC.`) : null,
      el('h4', null, 'Bytes'),
      el('p', { class: 'caption small' }, bytes.length < total
        ? `The first ${bytes.length} of ${total} bytes (the daemon keeps the first ${HEX_BYTES_KEPT}).`
        : `All ${total} bytes.`),
      hexDump(bytes, byteRegions(packet, headers, bytes.length, total)),
      hexLegend());
  }

  function headerBlock(name, fields) {
    const rows = orderedFields(name, fields).map(([field, value]) => [field, fieldText(field, value)]);
    return el('div', { class: 'header-block' },
      el('h4', null, name, el('span', { class: 'muted small' }, ` ${wire().header_bytes[name] ? `${wire().header_bytes[name]} bytes` : ''}`)),
      HEADER_CAPTIONS[name] ? el('p', { class: 'caption small' }, HEADER_CAPTIONS[name]) : null,
      rows.length ? factTable(rows, 'facts header-fields') : el('p', { class: 'muted small' }, 'no fields'));
  }

  function fieldText(field, value) {
    if (typeof value === 'boolean') return value ? 'yes (1)' : 'no (0)';
    if ((typeof value === 'number' || typeof value === 'bigint') && HEX_FIELDS.has(field)) {
      return `${value} (${fmtHex(value)})`;
    }
    if (field === 'opcode' && isNum(value)) return `${value} (${fmtHex(value, 2)}, ${opcodeName(value)})`;
    if (field === 'rnr_wait_us' && isNum(value)) return fmtDurationUs(value);
    return fmtValue(value);
  }

  function hexToBytes(hex) {
    const text = String(hex).replace(/[^0-9a-fA-F]/g, '');
    const bytes = new Uint8Array(text.length >> 1);
    for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(text.substr(i * 2, 2), 16);
    return bytes;
  }

  // Which header each byte belongs to, for the hex dump's colours.
  function byteRegions(packet, headers, captured, total) {
    const regions = [];
    let offset = 0;
    if (packet.error) return regions;
    for (const [name] of orderedHeaders(headers)) {
      const size = wire().header_bytes[name];
      if (!size) return regions;  // a header we do not know the size of: stop colouring
      regions.push({ start: offset, end: offset + size, name, cls: name === 'BTH' ? 'hx-bth' : 'hx-ext' });
      offset += size;
    }
    const pad = headers.BTH && isNum(headers.BTH.pad) ? headers.BTH.pad : 0;
    const icrc = wire().icrc_bytes;
    const payloadEnd = total - icrc - pad;
    if (payloadEnd > offset) regions.push({ start: offset, end: payloadEnd, name: 'payload', cls: 'hx-payload' });
    if (pad) regions.push({ start: payloadEnd, end: payloadEnd + pad, name: 'pad', cls: 'hx-pad' });
    regions.push({ start: total - icrc, end: total, name: 'ICRC', cls: 'hx-icrc' });
    return regions.filter((r) => r.start < captured);
  }

  function hexDump(bytes, regions) {
    const classOf = (i) => {
      const region = regions.find((r) => i >= r.start && i < r.end);
      return region ? region.cls : '';
    };
    const titleOf = (i) => {
      const region = regions.find((r) => i >= r.start && i < r.end);
      return region ? `${region.name}, byte ${i}` : `byte ${i}`;
    };
    const pre = el('pre', { class: 'hexdump' });
    for (let line = 0; line < bytes.length; line += 16) {
      const row = el('span', { class: 'hx-line' }, el('span', { class: 'hx-offset' }, line.toString(16).padStart(4, '0')), '  ');
      let ascii = '';
      for (let i = line; i < line + 16; i++) {
        if (i < bytes.length) {
          row.append(el('span', { class: classOf(i), title: titleOf(i) }, hex2(bytes[i])));
          ascii += bytes[i] >= 0x20 && bytes[i] < 0x7f ? String.fromCharCode(bytes[i]) : '.';
        } else {
          row.append('  ');
        }
        row.append(i === line + 7 ? '  ' : ' ');
      }
      row.append(' ', el('span', { class: 'hx-ascii' }, ascii), '\n');
      pre.append(row);
    }
    if (!bytes.length) pre.append('(no bytes)');
    return pre;
  }

  function hexLegend() {
    return el('p', { class: 'hex-legend small' },
      [['hx-bth', 'BTH'], ['hx-ext', 'extension headers'], ['hx-payload', 'payload'], ['hx-pad', 'pad'], ['hx-icrc', 'ICRC']]
        .map(([cls, text]) => el('span', { class: `hx-key ${cls}` }, text)));
  }

  // ------------------------------------------------------------- step

  function renderStepPanels() {
    const container = $('#step-panels');
    const devices = snapshotDevices();
    const byName = new Map(devices.map((d) => [d.name, d]));
    syncKeyed(container, devices.map((d) => d.name), createStepPanel, (panel, name) => fillStepPanel(panel, byName.get(name)));
  }

  function createStepPanel(name) {
    const panel = el('div', { class: 'card step-panel', dataset: { device: name } },
      el('div', { class: 'card-head' }, el('h3', null, name), el('span', { class: 'step-state badge' }, '')),
      el('p', { class: 'step-summary small' }));
    if (!state.readOnly) {
      const result = el('p', { class: 'result', 'aria-live': 'polite' });
      const button = (action, text, help) => el('button', {
        type: 'button', class: `button step-${action}`, title: help,
        onclick: () => stepCommand(name, action, result),
      }, text);
      panel.append(el('div', { class: 'step-buttons' },
        button('pause', 'Pause', 'hold every packet this device sends from now on'),
        button('next', '▶ Next', 'let the chosen (or oldest) held packet go'),
        button('drop', '✕ Drop', 'lose the chosen (or oldest) held packet'),
        button('duplicate', 'Duplicate', 'send a copy of the chosen (or oldest) packet now and keep it held'),
        button('run', 'Run', 'let every held packet go, oldest first, and stop holding')), result);
    }
    panel.append(el('ul', { class: 'held-list' }));
    const list = panel.querySelector('.held-list');
    list.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); event.target.click(); }
    });
    list.addEventListener('click', (event) => {
      const item = event.target.closest('li.held-packet');
      if (!item) return;
      const id = Number(item.dataset.id);
      const chosen = state.heldSelection.get(name) === id ? null : id;  // a second click unchooses
      if (chosen === null) state.heldSelection.delete(name); else state.heldSelection.set(name, chosen);
      for (const li of panel.querySelectorAll('li.held-packet')) li.classList.toggle('selected', Number(li.dataset.id) === chosen);
      updateStepSummary(panel, name);
    });
    return panel;
  }

  function fillStepPanel(panel, device) {
    const step = device.step || {};
    const held = Array.isArray(step.held) ? step.held : [];
    const stateEl = panel.querySelector('.step-state');
    stateEl.textContent = step.paused ? 'paused' : 'running';
    stateEl.classList.toggle('badge-held', !!step.paused);
    stateEl.classList.toggle('badge-good', !step.paused);
    // Forget a choice that left the wire.
    const chosen = state.heldSelection.get(device.name);
    if (chosen !== undefined && !held.some((h) => h.id === chosen)) state.heldSelection.delete(device.name);
    const list = panel.querySelector('.held-list');
    const chosenNow = state.heldSelection.get(device.name);
    const byId = new Map(held.map((h) => [String(h.id), h]));
    // Items are kept by id (only their time changes), so a click is never
    // lost to a redraw between mouse down and up.
    syncKeyed(list, held.map((h) => String(h.id)),
      (id) => el('li', {
        class: 'held-packet', dataset: { id }, tabindex: '0',
        title: 'click to choose this packet for Next, Drop or Duplicate',
      }, el('span', { class: 'held-id' }, `#${id}`), el('span', { class: 'held-to' }),
      el('span', { class: 'held-summary' }), el('span', { class: 'held-time' })),
      (li, id) => {
        const h = byId.get(id);
        li.classList.toggle('selected', chosenNow === h.id);
        li.querySelector('.held-to').textContent = `to ${h.to}`;
        li.querySelector('.held-summary').textContent = String(h.summary ?? packetLabel(h.packet));
        li.querySelector('.held-time').textContent = `held ${fmtDurationUs(h.held_us)}`;
      }, 'id');
    if (!held.length) {
      list.append(el('li', { class: 'held-empty muted' }, step.paused
        ? 'Nothing held yet: packets the device sends now wait here.' : 'The wire runs: nothing is held.'));
    }
    panel.dataset.paused = String(!!step.paused);
    panel.dataset.heldCount = String(held.length);
    updateStepSummary(panel, device.name, step);
  }

  function updateStepSummary(panel, name, step) {
    const device = snapshotDevices().find((d) => d.name === name);
    step = step || (device && device.step) || {};
    const held = Array.isArray(step.held) ? step.held.length : 0;
    const chosen = state.heldSelection.get(name);
    panel.querySelector('.step-summary').textContent = step.paused
      ? `${held} held (at most ${fmtValue(step.max_held)}). ${chosen !== undefined
        ? `Next, Drop and Duplicate act on #${chosen}.` : 'Next, Drop and Duplicate act on the oldest.'}`
      : `Every packet goes straight out.${state.readOnly ? '' : ' Pause to hold them.'}`;
  }

  function stepCommand(device, action, resultEl) {
    const command = { command: 'step', device, action };
    if (action === 'next' || action === 'drop' || action === 'duplicate') {
      command.packet = state.heldSelection.get(device) ?? 0;  // 0: the oldest
    }
    // After next or drop the chosen packet is gone: the following click
    // must not name it again (the snapshot that says so comes later).
    if (action === 'next' || action === 'drop' || action === 'run') {
      state.heldSelection.delete(device);
      const panel = document.querySelector(`div.step-panel[data-device="${CSS.escape(device)}"]`);
      if (panel) {
        for (const li of panel.querySelectorAll('li.held-packet.selected')) li.classList.remove('selected');
        updateStepSummary(panel, device);
      }
    }
    const target = command.packet === undefined ? '' : command.packet ? ` #${command.packet}` : ' (oldest)';
    sendCommand(command, resultEl, `${action}${target} on ${device}`);
  }

  // ------------------------------------------------------------- faults

  const FAULT_FIELDS = [
    // name, label, unit, min, max, step, snapshot value -> input value
    ['drop', 'Drop', '%', 0, 100, 0.1, (f) => +(100 * (f.drop || 0)).toFixed(3), 'each packet is lost with this probability'],
    ['duplicate', 'Duplicate', '%', 0, 100, 0.1, (f) => +(100 * (f.duplicate || 0)).toFixed(3), 'each packet is sent twice with this probability'],
    ['reorder', 'Reorder', '%', 0, 100, 0.1, (f) => +(100 * (f.reorder || 0)).toFixed(3), 'each packet is held back 200 µs with this probability, so later ones overtake it'],
    ['delay_us', 'Delay', 'µs', 0, 10000000, 1, (f) => f.delay_us || 0, 'every packet is delayed this long (at most 10 s)'],
  ];

  function renderFaultForms() {
    const container = $('#fault-forms');
    const devices = snapshotDevices();
    const byName = new Map(devices.map((d) => [d.name, d]));
    syncKeyed(container, devices.map((d) => d.name), createFaultCard, (card, name) => fillFaultCard(card, byName.get(name)));
  }

  function createFaultCard(name) {
    const card = el('div', { class: 'card fault-card', dataset: { device: name } },
      el('div', { class: 'card-head' }, el('h3', null, name)),
      el('p', { class: 'fault-current' }));
    if (state.readOnly) return card;
    const result = el('p', { class: 'result', 'aria-live': 'polite' });
    const form = el('form', { class: 'fault-form', dataset: { device: name }, novalidate: true },
      el('div', { class: 'fault-fields' }, FAULT_FIELDS.map(([field, label, unit, min, max, step, , help]) =>
        el('label', { class: 'field', title: help },
          el('span', { class: 'field-label' }, label),
          el('span', { class: 'field-input' },
            el('input', { type: 'number', name: field, min, max, step, value: '0', inputmode: 'decimal' }),
            el('span', { class: 'unit' }, unit))))),
      el('div', { class: 'fault-buttons' },
        el('button', { type: 'submit', class: 'button fault-apply' }, 'Apply'),
        el('button', { type: 'button', class: 'button button-quiet fault-clear' }, 'Clear all')),
      result);
    form.addEventListener('input', () => state.faultEdited.add(name));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      applyFaults(name, form, result);
    });
    form.querySelector('.fault-clear').addEventListener('click', () => {
      for (const input of form.querySelectorAll('input')) input.value = '0';
      applyFaults(name, form, result);
    });
    card.append(form);
    return card;
  }

  function fillFaultCard(card, device) {
    const faults = device.faults || {};
    card.querySelector('.fault-current').textContent = `Now: ${faultsText(device.faults)}`;
    const form = card.querySelector('form.fault-form');
    // Show the daemon's settings, unless the reader is typing new ones.
    if (!form || state.faultEdited.has(device.name) || form.contains(document.activeElement)) return;
    for (const [field, , , , , , fromSnapshot] of FAULT_FIELDS) {
      form.elements[field].value = String(fromSnapshot(faults));
    }
  }

  function applyFaults(device, form, resultEl) {
    const values = {};
    for (const [field, label, , min, max] of FAULT_FIELDS) {
      const text = form.elements[field].value.trim();
      const value = text === '' ? 0 : Number(text);
      if (!Number.isFinite(value) || value < min || value > max) {
        showResult(resultEl, false, `${label} must be a number from ${min} to ${max}`);
        return;
      }
      values[field] = value;
    }
    state.faultEdited.delete(device);
    sendCommand({
      command: 'fault', device,
      drop: values.drop / 100, duplicate: values.duplicate / 100, reorder: values.reorder / 100,
      delay_us: Math.round(values.delay_us),
    }, resultEl, `faults on ${device}`);
  }

  // ----------------------------------------------------------- recording

  function updateRecordingInfo() {
    const kept = state.live.length;
    $('#recording-info').textContent = kept
      ? `${fmtInt(kept)} packets kept (seq ${state.live[0].seq} to ${state.live[kept - 1].seq}).`
      : 'No packets kept yet.';
  }

  function ipv4Bytes(text) {
    const parts = String(text).split('.').map(Number);
    if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return [0, 0, 0, 0];
    return parts;
  }

  function ipv4Checksum(header) {
    let sum = 0;
    for (let i = 0; i < header.length; i += 2) sum += (header[i] << 8) | header[i + 1];
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    return ~sum & 0xffff;
  }

  // One record as an Ethernet frame, as `uroce trace` frames packets: MACs
  // 02:00 + the IPv4 address, IPv4 with DF and TTL 64, UDP to 4791 without a
  // checksum. Only the bytes the daemon kept are captured; lengths are the
  // packet's real ones.
  function frameOf(rec) {
    const payload = hexToBytes(rec.packet && rec.packet.bytes || '');
    const total = rec.packet && isNum(rec.packet.bytes_total) ? rec.packet.bytes_total : payload.length;
    const src = ipv4Bytes(rec.src);
    const dst = ipv4Bytes(rec.dst);
    const frame = new Uint8Array(14 + 20 + 8 + payload.length);
    frame.set([0x02, 0x00, ...dst, 0x02, 0x00, ...src, 0x08, 0x00], 0);
    const ip = new Uint8Array(20);
    const ipLength = 20 + 8 + total;
    ip.set([0x45, 0x00, (ipLength >> 8) & 0xff, ipLength & 0xff, (rec.seq >> 8) & 0xff, rec.seq & 0xff,
      0x40, 0x00, 64, 17, 0, 0, ...src, ...dst]);
    const checksum = ipv4Checksum(ip);
    ip[10] = checksum >> 8;
    ip[11] = checksum & 0xff;
    frame.set(ip, 14);
    const udpLength = 8 + total;
    const srcPort = isNum(rec.src_port) ? rec.src_port : 0;
    frame.set([(srcPort >> 8) & 0xff, srcPort & 0xff, (ROCE_PORT >> 8) & 0xff, ROCE_PORT & 0xff,
      (udpLength >> 8) & 0xff, udpLength & 0xff, 0, 0], 34);
    frame.set(payload, 42);
    return { frame, original: 42 + total };
  }

  function buildPcap(records) {
    const frames = records.map(frameOf);
    const size = 24 + frames.reduce((n, f) => n + 16 + f.frame.length, 0);
    const out = new Uint8Array(size);
    const view = new DataView(out.buffer);
    view.setUint32(0, 0xa1b2c3d4, true);  // written little-endian: readers learn the order from it
    view.setUint16(4, 2, true);
    view.setUint16(6, 4, true);
    view.setInt32(8, 0, true);    // thiszone
    view.setUint32(12, 0, true);  // sigfigs
    view.setUint32(16, 65535, true);
    view.setUint32(20, 1, true);  // LINKTYPE_ETHERNET
    let offset = 24;
    records.forEach((rec, i) => {
      const { frame, original } = frames[i];
      const tUs = state.pageStartUs + (isNum(rec.t_us) ? rec.t_us : 0);
      view.setUint32(offset, Math.floor(tUs / 1e6), true);
      view.setUint32(offset + 4, Math.floor(tUs % 1e6), true);
      view.setUint32(offset + 8, frame.length, true);
      view.setUint32(offset + 12, original, true);
      out.set(frame, offset + 16);
      offset += 16 + frame.length;
    });
    return out;
  }

  function downloadPcap() {
    const records = state.live.map((e) => e.rec);
    const data = buildPcap(records);
    const blob = new Blob([data], { type: 'application/vnd.tcpdump.pcap' });
    const url = URL.createObjectURL(blob);
    const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
    const link = el('a', { href: url, download: `uroce-console-${stamp}.pcap`, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    showResult($('#recording-result'), true, `Wrote ${fmtInt(records.length)} packets (${fmtInt(data.length)} bytes).`);
  }

  // ------------------------------------------------------- pcap reading

  const LINKTYPES = { 1: 'ethernet', 101: 'raw', 228: 'ipv4', 113: 'sll', 276: 'sll2' };

  // Parses a classic pcap (either byte order, µs or ns timestamps) into
  // packets: {tUs, src, dst, srcPort, dstPort, bytes, total}.
  function parsePcap(buffer) {
    const view = new DataView(buffer);
    if (buffer.byteLength < 24) throw new Error('too short to be a pcap file');
    const magicBig = view.getUint32(0, false);
    let little;
    let nanos = false;
    if (magicBig === 0xa1b2c3d4 || magicBig === 0xa1b23c4d) {
      little = false;
      nanos = magicBig === 0xa1b23c4d;
    } else if (magicBig === 0xd4c3b2a1 || magicBig === 0x4d3cb2a1) {
      little = true;
      nanos = magicBig === 0x4d3cb2a1;
    } else if (magicBig === 0x0a0d0d0a) {
      throw new Error('this is a pcapng file; save it as classic pcap (editcap -F pcap IN OUT) and open that');
    } else {
      throw new Error('not a pcap file (unknown magic number)');
    }
    const linktype = view.getUint32(20, little) & 0x0fffffff;
    const link = LINKTYPES[linktype];
    if (!link) throw new Error(`link type ${linktype} is not supported (Ethernet, raw IPv4 and Linux cooked are)`);
    const packets = [];
    let offset = 24;
    let total = 0;
    while (offset + 16 <= buffer.byteLength) {
      const seconds = view.getUint32(offset, little);
      const fraction = view.getUint32(offset + 4, little);
      const captured = view.getUint32(offset + 8, little);
      const original = view.getUint32(offset + 12, little);
      offset += 16;
      if (offset + captured > buffer.byteLength) break;  // a truncated last packet
      total += 1;
      const frame = new Uint8Array(buffer, offset, captured);
      offset += captured;
      const udp = udpOf(frame, link, original - captured);
      if (!udp) continue;
      if (packets.length >= REPLAY_MAX_PACKETS) continue;
      packets.push({ tUs: seconds * 1e6 + (nanos ? Math.floor(fraction / 1000) : fraction), ...udp });
    }
    return { packets, total };
  }

  // The IPv4/UDP inside a frame, or null. `missing` is how many bytes of the
  // frame were not captured.
  function udpOf(frame, link, missing) {
    let ip = 0;
    let etherType = 0x0800;
    if (link === 'ethernet') {
      if (frame.length < 14) return null;
      etherType = (frame[12] << 8) | frame[13];
      ip = 14;
      while ((etherType === 0x8100 || etherType === 0x88a8) && frame.length >= ip + 4) {
        etherType = (frame[ip + 2] << 8) | frame[ip + 3];  // skip a VLAN tag
        ip += 4;
      }
    } else if (link === 'sll') {
      if (frame.length < 16) return null;
      etherType = (frame[14] << 8) | frame[15];
      ip = 16;
    } else if (link === 'sll2') {
      if (frame.length < 20) return null;
      etherType = (frame[0] << 8) | frame[1];
      ip = 20;
    }
    if (etherType !== 0x0800 || frame.length < ip + 20 || frame[ip] >> 4 !== 4) return null;
    const ihl = (frame[ip] & 0x0f) * 4;
    const fragmentOffset = ((frame[ip + 6] & 0x1f) << 8) | frame[ip + 7];
    if (frame[ip + 9] !== 17 || fragmentOffset !== 0 || frame.length < ip + ihl + 8) return null;
    const udp = ip + ihl;
    const udpLength = (frame[udp + 4] << 8) | frame[udp + 5];
    const capturedPayload = frame.length - udp - 8;
    const total = udpLength >= 8 ? udpLength - 8 : capturedPayload + Math.max(0, missing);
    return {
      src: Array.from(frame.subarray(ip + 12, ip + 16)).join('.'),
      dst: Array.from(frame.subarray(ip + 16, ip + 20)).join('.'),
      srcPort: (frame[udp] << 8) | frame[udp + 1],
      dstPort: (frame[udp + 2] << 8) | frame[udp + 3],
      bytes: frame.slice(udp + 8, udp + 8 + Math.min(capturedPayload, total)),
      total,
    };
  }

  // Has the daemon decode packets (a pcap file's UDP payloads, their first
  // HEX_BYTES_KEPT bytes and length), DECODE_BATCH to a command, one
  // command at a time; resolves with them decoded, in order.
  function decodeOnDaemon(packets) {
    const batches = [];
    for (let i = 0; i < packets.length; i += DECODE_BATCH) batches.push(packets.slice(i, i + DECODE_BATCH));
    const decoded = [];
    const decodeBatch = (batch) => new Promise((resolve, reject) => {
      const socket = state.socket;
      if (!socket || socket.readyState !== WebSocket.OPEN) {
        reject(new Error('not connected to the daemon, which decodes the packets'));
        return;
      }
      const id = state.nextCommandId++;
      state.decoding.set(id, { resolve, reject });
      socket.send(JSON.stringify({
        id, command: 'decode',
        packets: batch.map((p) => ({
          bytes: Array.from(p.bytes.subarray(0, HEX_BYTES_KEPT), hex2).join(''), total: p.total,
        })),
      }));
    });
    return batches.reduce((done, batch) => done.then(() => decodeBatch(batch))
      .then((result) => { decoded.push(...result); }), Promise.resolve()).then(() => decoded);
  }

  // A RoCE packet names only the QP it goes to. The sending QP is learnt
  // from the answers: a response from B to QP a that carries the PSN of a
  // request A sent to QP b pairs A/a with B/b. UD packets carry their sender
  // in the DETH.
  function inferSenders(packets) {
    const pairs = new Map();  // "addr/qpn" -> "addr/qpn" of its peer
    const requests = new Map();  // "A>B>psn" -> Set of dest QPs
    for (const p of packets) {
      if (p.decoded.error || packetKind(p.decoded) === 'response' || packetKind(p.decoded) === 'nak') continue;
      const key = `${p.src}>${p.dst}>${p.decoded.psn}`;
      if (!requests.has(key)) requests.set(key, new Set());
      requests.get(key).add(p.decoded.dest_qp);
    }
    for (const p of packets) {
      const kind = packetKind(p.decoded);
      if (kind !== 'response' && kind !== 'nak') continue;
      const candidates = requests.get(`${p.dst}>${p.src}>${p.decoded.psn}`);
      if (candidates && candidates.size === 1) {
        const requester = `${p.dst}/${p.decoded.dest_qp}`;
        const responder = `${p.src}/${[...candidates][0]}`;
        pairs.set(requester, responder);
        pairs.set(responder, requester);
      }
    }
    // One QP each way between two addresses: they must be each other's peer.
    const destsByDirection = new Map();
    for (const p of packets) {
      if (p.decoded.error) continue;
      const key = `${p.src}>${p.dst}`;
      if (!destsByDirection.has(key)) destsByDirection.set(key, new Set());
      destsByDirection.get(key).add(p.decoded.dest_qp);
    }
    for (const [key, dests] of destsByDirection) {
      const [a, b] = key.split('>');
      const back = destsByDirection.get(`${b}>${a}`);
      if (dests.size === 1 && back && back.size === 1) {
        const qpAtB = `${b}/${[...dests][0]}`;
        const qpAtA = `${a}/${[...back][0]}`;
        if (!pairs.has(qpAtB)) pairs.set(qpAtB, qpAtA);
        if (!pairs.has(qpAtA)) pairs.set(qpAtA, qpAtB);
      }
    }
    return (p) => {
      const d = p.decoded;
      if (d.error) return null;
      if (d.headers.DETH) return d.headers.DETH.src_qp;
      const peer = pairs.get(`${p.dst}/${d.dest_qp}`);
      if (peer && peer.startsWith(`${p.src}/`)) return Number(peer.slice(p.src.length + 1));
      return null;
    };
  }

  function openPcap(file) {
    const resultEl = $('#recording-result');
    if (!file) return;
    showResult(resultEl, null, `Reading ${file.name}…`);
    file.arrayBuffer().then((buffer) => {
      const { packets, total } = parsePcap(buffer);
      return decodeOnDaemon(packets).then((decoded) => ({ packets, total, decoded }));
    }).then(({ packets, total, decoded }) => {
      // UDP to 4791 is RoCEv2; on another port (a daemon with --udp-port)
      // a packet counts if it parses as one.
      const roce = [];
      packets.forEach((p, i) => {
        p.decoded = decoded[i];
        if (p.dstPort === ROCE_PORT || !p.decoded.error) roce.push(p);
      });
      startReplay(file.name, roce, total);
      const notRoce = total - roce.length;
      showResult(resultEl, true, `Replaying ${file.name}: ${fmtInt(roce.length)} RoCEv2 packets of ${fmtInt(total)}${
        notRoce ? ` (${fmtInt(notRoce)} others skipped)` : ''}${packets.length >= REPLAY_MAX_PACKETS ? `; only the first ${fmtInt(REPLAY_MAX_PACKETS)} UDP packets are read` : ''}.`);
    }).catch((error) => {
      showResult(resultEl, false, `Cannot open ${file.name}: ${error.message}`);
    }).finally(() => {
      $('#open-pcap').value = '';  // opening the same file again fires `change`
    });
  }

  function startReplay(name, packets, total) {
    const senderOf = inferSenders(packets);
    const t0 = packets.length ? packets[0].tUs : 0;
    const tracker = new RetransmissionTracker();
    const entries = packets.map((p, i) => {
      const srcQp = senderOf(p);
      const rec = {
        seq: i + 1, t_us: p.tUs - t0, device: deviceNamedAt(p.src) || p.src, src: p.src, dst: p.dst,
        src_port: p.srcPort, dst_port: p.dstPort, src_qp: srcQp === null ? undefined : srcQp, fate: 'sent',
        packet: p.decoded,
      };
      return makeEntry(rec, tracker);
    });
    state.replay = { name, entries, end: Math.min(entries.length, LADDER_MAX_DRAWN), total };
    state.ladder.selectedSeq = null;
    $('#packet-detail').hidden = true;
    $('#packet-hint').hidden = false;
    updateReplayBanner();
    $('#wire').scrollIntoView({ behavior: 'smooth', block: 'start' });
    scheduleLadderDraw();
  }

  function updateReplayBanner() {
    const banner = $('#replay-banner');
    const replay = state.replay;
    banner.hidden = !replay;
    $('#ladder-pause').disabled = !!replay;
    if (!replay) return;
    const first = Math.max(0, replay.end - LADDER_MAX_DRAWN);
    $('#replay-text').textContent = `Replay of ${replay.name}: packets ${replay.entries.length ? first + 1 : 0}–${replay.end} of ${
      replay.entries.length}. Live drawing is stopped (packets are still recorded). A sender's QP is inferred from the answers it gets: a RoCE packet names only the QP it goes to.`;
    $('#replay-earlier').disabled = first === 0;
    $('#replay-later').disabled = replay.end >= replay.entries.length;
  }

  function moveReplay(delta) {
    const replay = state.replay;
    if (!replay) return;
    const length = replay.entries.length;
    replay.end = Math.max(Math.min(length, LADDER_MAX_DRAWN), Math.min(length, replay.end + delta));
    state.ladder.source = null;  // start at the top of the new window
    updateReplayBanner();
    scheduleLadderDraw();
  }

  function backToLive() {
    state.replay = null;
    state.ladder.selectedSeq = null;
    $('#packet-detail').hidden = true;
    $('#packet-hint').hidden = false;
    updateReplayBanner();
    scheduleLadderDraw();
  }

  // --------------------------------------------------------------- start

  function init() {
    const ladder = $('#ladder');
    // Select on pointerdown too: the ladder may be redrawn between a mouse
    // button's down and up, and then no click reaches the packet.
    ladder.addEventListener('pointerdown', (event) => { if (event.button === 0) onLadderClick(event); });
    ladder.addEventListener('click', onLadderClick);
    ladder.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && event.target.closest && event.target.closest('g.ladder-packet')) onLadderClick(event);
    });
    ladder.addEventListener('scroll', () => {
      state.ladder.stick = ladder.scrollTop + ladder.clientHeight >= ladder.scrollHeight - ROW_H;
    }, { passive: true });
    $('#ladder-pause').addEventListener('click', toggleLadderPause);
    $('#ladder-clear').addEventListener('click', clearLadder);
    $('#download-pcap').addEventListener('click', downloadPcap);
    $('#open-pcap').addEventListener('change', (event) => openPcap(event.target.files && event.target.files[0]));
    $('#replay-earlier').addEventListener('click', () => moveReplay(-REPLAY_PAGE));
    $('#replay-later').addEventListener('click', () => moveReplay(REPLAY_PAGE));
    $('#back-to-live').addEventListener('click', backToLive);
    // A wider window gives the lifelines more room.
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(scheduleLadderDraw, 150);
    });
    updateRecordingInfo();
    updateLadderCount();
    drawLadder();
    connect();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

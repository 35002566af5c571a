// Enlace's family page. Everything that comes from the model, a search result or the server is
// put in the page with textContent or as an attribute checked here: never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { me: null, current: null, source: null, watchdog: null };

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

async function api(path, body, method) {
  const options = { headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.method = method || "POST";
    options.headers["Content-Type"] = "application/json";
    if (state.me) options.headers["X-Enlace-CSRF"] = state.me.csrf;
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (!response.ok) {
    const error = new Error(data.error || "Algo ha fallado (" + response.status + ").");
    error.status = response.status;
    throw error;
  }
  return data;
}

// ------------------------------------------------------------------ signing in
async function start() {
  try {
    state.me = await api("/api/me");
  } catch (e) {
    if (e.status === 401) return showLogin();
    return cannotConnect();
  }
  $("text").maxLength = state.me.max_message_chars;
  $("memory-open").hidden = !state.me.memory;
  $("login").hidden = true;
  try {
    await loadList();
    const wanted = location.hash.slice(1);
    if (wanted) await openConversation(wanted); else newConversation();
  } catch (e) {
    return e.status === 401 ? showLogin() : cannotConnect();
  }
  // Shown only now: a question typed before the list arrived was wiped by the line above.
  document.body.classList.add("in");
  $("who").textContent = state.me.name;
  $("app").hidden = false;
  $("text").focus();
}

function cannotConnect() {  // #status lives in the hidden chat, so the page says it on its own
  $("login").hidden = true;
  $("trouble").hidden = false;
}

async function showLogin() {
  document.body.classList.remove("in");
  $("app").hidden = true;
  $("login").hidden = false;
  const { people } = await api("/api/people");
  const box = $("people");
  box.replaceChildren();
  people.forEach((person, i) => {
    const label = el("label");
    const radio = el("input");
    radio.type = "radio";
    radio.name = "person";
    radio.value = person.name;
    radio.dataset.needsToken = person.needs_token ? "1" : "";
    radio.addEventListener("change", () => { $("token-row").hidden = !person.needs_token; });
    if (i === 0) { radio.checked = true; $("token-row").hidden = !person.needs_token; }
    label.append(radio, document.createTextNode(person.name));
    box.append(label);
  });
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const chosen = document.querySelector("input[name=person]:checked");
  if (!chosen) return;
  try {
    await api("/api/login", { name: chosen.value, token: $("token").value });
    $("token").value = "";
    $("login-error").textContent = "";
    await start();
  } catch (e) {
    $("login-error").textContent = e.message;
  }
});

$("logout").addEventListener("click", async () => {
  try { await api("/api/logout", {}); } catch (e) { /* signed out anyway */ }
  state.me = null;
  location.hash = "";
  showLogin();
});

// ------------------------------------------------------------------ conversations
async function loadList() {
  const { conversations } = await api("/api/conversations");
  const list = $("conversations");
  list.replaceChildren();
  for (const c of conversations) list.append(listItem(c));
}

const WHEN = new Intl.DateTimeFormat("es-ES", { dateStyle: "medium", timeStyle: "short" });

function listItem(c) {
  const link = el("a");
  link.href = "#" + encodeURIComponent(c.id);
  if (c.id === state.current) link.className = "current";
  const when = new Date(c.updated * 1000);
  // A conversation asked through the OpenAI-compatible API says from which device («móvil»).
  const time = el("time", WHEN.format(when) + (c.device ? " · desde «" + c.device + "»" : ""));
  time.dateTime = when.toISOString();
  link.append(el("span", c.title, "title"), time);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    $("side").classList.remove("open");
    openConversation(c.id);
  });
  const rename = iconButton("✎", "Cambiar el nombre de «" + c.title + "»");
  const remove = iconButton("✕", "Borrar «" + c.title + "»");
  const item = el("li");
  item.append(link, rename, remove);
  rename.addEventListener("click", () => askRename(item, c));
  remove.addEventListener("click", () => askDelete(item, c));
  return item;
}

function iconButton(symbol, label) {
  const button = el("button", symbol, "icon");
  button.type = "button";
  button.setAttribute("aria-label", label);
  button.title = label;
  return button;
}

// Renaming, correcting and deleting happen inside the list item (no browser dialogs): a small
// form, or a question with «Sí, …» / «No». Escape or «Cancelar» / «No» puts the item back.
function inlineEdit(item, labelText, value, restore, save) {
  const form = el("form");
  const label = el("label", labelText);
  const input = el("input");
  input.value = value;
  input.required = true;
  label.append(input);
  const submit = el("button", "Guardar");
  submit.type = "submit";
  const cancel = el("button", "Cancelar", "ghost");
  cancel.type = "button";
  form.append(label, submit, cancel);
  item.classList.add("asking");
  item.replaceChildren(form);
  cancel.addEventListener("click", restore);
  input.addEventListener("keydown", (event) => { if (event.key === "Escape") restore(); });
  form.addEventListener("submit", (event) => { event.preventDefault(); save(input.value); });
  input.focus();
  input.select();
}

function inlineConfirm(item, questionText, yesText, restore, confirmed) {
  const question = el("span", questionText);
  const yes = el("button", yesText, "danger");
  yes.type = "button";
  const no = el("button", "No", "ghost");
  no.type = "button";
  item.classList.add("asking");
  item.replaceChildren(question, yes, no);
  no.addEventListener("click", restore);
  yes.addEventListener("click", confirmed);
  no.focus();
}

function askRename(item, c) {
  inlineEdit(item, "Nuevo nombre", c.title, () => item.replaceWith(listItem(c)), async (title) => {
    try {
      await api("/api/conversations/" + encodeURIComponent(c.id), { title }, "PATCH");
      await loadList();
    } catch (e) {
      setStatus(e.message);
    }
  });
}

function askDelete(item, c) {
  const restore = () => item.replaceWith(listItem(c));
  inlineConfirm(item, "¿Borrar «" + c.title + "»? No se puede deshacer.", "Sí, borrar", restore, async () => {
    try {
      await api("/api/conversations/" + encodeURIComponent(c.id), {}, "DELETE");
      if (state.current === c.id) newConversation();
      await loadList();
    } catch (e) {
      setStatus(e.message);
      restore();
    }
  });
}

function newConversation() {
  closeMemory();
  stopFollowing();
  state.current = null;
  history.replaceState(null, "", location.pathname);
  $("messages").replaceChildren();
  setStatus("");
  setBusy(false);
  $("text").focus();
}

async function openConversation(id) {
  closeMemory();
  stopFollowing();
  let data;
  try {
    data = await api("/api/conversations/" + encodeURIComponent(id));
  } catch (e) {
    newConversation();
    return setStatus(e.message);
  }
  state.current = data.id;
  history.replaceState(null, "", "#" + encodeURIComponent(data.id));
  $("messages").replaceChildren();
  for (const m of data.messages) {
    const item = addMessage(m.role, m.content, m.sources, m.model, m.memories);
    if (m.left_out_notice) item.append(leftOutNote(m.left_out_notice));
  }
  showNewest(true);
  setStatus("");
  setBusy(false);
  if (data.answering) follow(data.id);
  await loadList();
}

$("new").addEventListener("click", () => { $("side").classList.remove("open"); newConversation(); loadList(); });
$("toggle-list").addEventListener("click", () => {
  const open = $("side").classList.toggle("open");
  $("toggle-list").setAttribute("aria-expanded", open ? "true" : "false");
});

// ------------------------------------------------------------------ messages
function addMessage(role, text, sources, model, memories) {
  const item = el("li", null, "msg " + role);
  const body = el("div", null, "text");
  if (role === "assistant") renderMarkdown(body, text); else body.textContent = text;
  item.append(body);
  if (sources && sources.length) item.append(sourceList(sources));
  if (memories && memories.length) item.append(rememberedNote(memories));
  if (model) item.append(modelNote(model));
  $("messages").append(item);
  return item;
}

// The newest turn stays in view (its last lines right above the question box) while an answer
// is written, unless the person has scrolled up to read: then the page stays where they are
// until they scroll back down to the end.
const END_SLACK_PX = 48;  // this close to the end still counts as being at the end
let atEnd = true;
window.addEventListener("scroll", () => {
  const page = document.documentElement;
  atEnd = page.scrollHeight - (window.scrollY + window.innerHeight) <= END_SLACK_PX;
}, { passive: true });

function showNewest(always) {  // `always`: the person asked or opened it, so go to the end
  if (always) atEnd = true;
  if (atEnd) window.scrollTo(0, document.documentElement.scrollHeight);
}

// The one check for every link the page makes (sources and answers): http(s) only.
function httpUrl(raw) {
  let url = null;
  try { url = new URL(raw); } catch (e) { return null; }
  return url.protocol === "https:" || url.protocol === "http:" ? url : null;
}

function link(url, text) {
  const a = el("a", text);
  a.href = url.href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  return a;
}

function site(url) {
  return url.hostname.replace(/^www\./, "");
}

function sourceList(sources) {
  const box = el("section", null, "sources");
  const title = el("h3", "Fuentes");
  const list = el("ol");
  for (const s of sources) {
    const item = el("li");
    const url = httpUrl(s.url);
    if (url) {
      item.append(link(url, s.title || url.href), el("span", " · " + site(url), "site"));
    } else {
      item.append(el("span", s.title || ""));
    }
    list.append(item);
  }
  box.append(title, list);
  return box;
}

// ------------------------------------------------------------------ a safe Markdown subset
// Paragraphs, «- » and «1. » lists, «#» headings (shown bold), **bold**, *italics* / _italics_,
// [text](address) and bare addresses. Built as DOM nodes with text in textContent: the model's
// text never becomes markup, and a link is made only for an address httpUrl accepts.
function renderMarkdown(container, text) {
  container.replaceChildren();
  let block = null;  // the open paragraph or list
  for (const line of String(text || "").replace(/\r\n?/g, "\n").split("\n")) {
    const bullet = /^\s*[-*+•]\s+(.*)$/.exec(line);
    const numbered = /^\s*(\d{1,9})[.)]\s+(.*)$/.exec(line);
    const heading = /^\s*#{1,6}\s+(.*)$/.exec(line);
    if (bullet || numbered) {
      const tag = bullet ? "UL" : "OL";
      if (!block || block.tagName !== tag) {
        block = el(tag.toLowerCase());
        if (numbered && numbered[1] !== "1") block.start = Number(numbered[1]);
        container.append(block);
      }
      const item = el("li");
      inline(item, bullet ? bullet[1] : numbered[2]);
      block.append(item);
    } else if (!line.trim()) {
      block = null;
    } else if (heading) {
      const p = el("p");
      const strong = el("strong");
      inline(strong, heading[1]);
      p.append(strong);
      container.append(p);
      block = null;
    } else {
      if (block && block.tagName === "P") block.append(el("br"));
      else { block = el("p"); container.append(block); }
      inline(block, line);
    }
  }
}

const INLINE = new RegExp([
  /\[([^\]\n]+)\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)/.source,  // [text](address)
  /(https?:\/\/[^\s<>"]+)/.source,                                          // a bare address
  /\*\*(?=\S)(.+?)\*\*/.source,                                              // **bold**
  /(?<![\p{L}\p{N}_])__(?=\S)(.+?)__(?![\p{L}\p{N}_])/.source,              // __bold__
  /\*(?=[^\s*])(.+?)\*/.source,                                               // *italics*
  /(?<![\p{L}\p{N}_])_(?=[^\s_])(.+?)_(?![\p{L}\p{N}_])/.source,            // _italics_
].join("|"), "u");

function inline(parent, text) {
  let rest = text;
  let m;
  while ((m = INLINE.exec(rest)) !== null) {
    if (m.index > 0) parent.append(rest.slice(0, m.index));
    let after = rest.slice(m.index + m[0].length);
    if (m[1] !== undefined) {
      const url = httpUrl(m[2]);
      parent.append(url ? link(url, m[1]) : m[1]);
    } else if (m[3] !== undefined) {
      const [address, tail] = trimAddress(m[3]);
      const url = httpUrl(address);
      if (url) {
        const a = link(url, site(url) + (url.pathname.length > 1 || url.search ? "/…" : ""));
        a.title = url.href;
        parent.append(a);
      } else {
        parent.append(address);
      }
      after = tail + after;
    } else {
      const strong = m[4] !== undefined || m[5] !== undefined;
      const node = el(strong ? "strong" : "em");
      inline(node, m[4] ?? m[5] ?? m[6] ?? m[7]);
      parent.append(node);
    }
    rest = after;
  }
  if (rest) parent.append(rest);
}

// A bare address ends before the punctuation that closes its sentence (and before a «)» it
// did not open).
function trimAddress(address) {
  let end = address.length;
  for (;;) {
    const last = address[end - 1];
    const open = address.slice(0, end).split("(").length - 1;
    const close = address.slice(0, end).split(")").length - 1;
    if (".,;:!?»\"'".includes(last) || (last === ")" && close > open)) end -= 1;
    else break;
  }
  return [address.slice(0, end), address.slice(end)];
}

$("ask").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  setBusy(true);
  setStatus("");
  try {
    const path = state.current
      ? "/api/conversations/" + encodeURIComponent(state.current) + "/messages"
      : "/api/conversations";
    const { id } = await api(path, { text });
    $("text").value = "";
    addMessage("user", text);
    showNewest(true);
    state.current = id;
    history.replaceState(null, "", "#" + encodeURIComponent(id));
    follow(id);
    loadList();
  } catch (e) {
    setStatus(e.message);
    setBusy(false);
  }
});

$("text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("ask").requestSubmit();
  }
});

// The memories an answer used, under it like its sources: «Recordé: …», and where to fix them.
function rememberedNote(memories) {
  const box = el("div", null, "remembered");
  box.append(el("strong", "Recordé: "));
  box.append(memories.map((m) => "«" + m.text + "»").join(" · ") + " ");
  const fix = el("button", "Corregir", "link");
  fix.type = "button";
  fix.addEventListener("click", () => openMemory());
  box.append(fix);
  return box;
}

// What the model did not do on its own word (a memory no one asked it to keep or forget): the
// person is asked, and only «Sí» does it, through the memories API; «No» leaves everything as it was.
function proposalBox(p) {
  const box = el("div", null, "proposal");
  const yes = el("button", "Sí");
  yes.type = "button";
  const no = el("button", "No", "ghost");
  no.type = "button";
  box.append(el("span", p.question + " «" + p.text + "» "), yes, no);
  no.addEventListener("click", () => box.remove());
  yes.addEventListener("click", async () => {
    let said;
    try {
      if (p.action === "olvidar") {
        await api("/api/memories/" + Number(p.memory_id), {}, "DELETE");
        said = FORGOTTEN;
      } else {
        const { new: added } = await api("/api/memories", { text: p.text, scope: p.scope });
        said = added ? SAVED : ALREADY_KEPT;
      }
    } catch (e) {
      said = e.message;
    }
    box.replaceChildren(el("span", said));
  });
  return box;
}

// The oldest turns the model did not see for this answer (no room in its context), under it.
function leftOutNote(notice) {
  return el("div", notice, "searching");
}

// Which model wrote an answer, in small text under it (text only, like everything else).
function modelNote(model) {
  return el("div", "Respuesta de " + model, "model");
}

// ------------------------------------------------------------------ following an answer
function follow(id) {
  stopFollowing();
  setBusy(true);
  setStatus("Enlace está pensando…");
  const answer = addMessage("assistant", "");
  const text = answer.querySelector(".text");
  const searching = el("div", null, "searching");
  answer.prepend(searching);
  showNewest();
  let written = "";
  let notices = [];  // what the tools said for the person (a failed search, a memory kept)
  let drawing = false;
  const draw = () => { drawing = false; if (written) renderMarkdown(text, written); showNewest(); };
  const source = new EventSource("/api/conversations/" + encodeURIComponent(id) + "/events");
  state.source = source;
  armWatchdog();
  source.onmessage = (message) => {
    armWatchdog();
    const event = JSON.parse(message.data);
    if (event.type === "text") {
      written += event.text;
      if (!drawing) { drawing = true; requestAnimationFrame(draw); }
      setStatus("Enlace está escribiendo…");
    } else if (event.type === "tool_call") {
      searching.textContent = event.status;  // the tool registry's line
      showNewest();
    } else if (event.type === "tool_result") {
      // A retry of the same tool that worked clears its failure.
      notices = notices.filter((n) => n.name !== event.name || n.ok);
      if (event.notice) notices.push({ name: event.name, ok: event.ok, text: event.notice });
      searching.textContent = notices.map((n) => n.text).join(" · ");
      if (event.proposal) answer.append(proposalBox(event.proposal));
      showNewest();
    } else if (event.type === "end") {
      written = event.text;
      draw();
      if (!notices.length) searching.remove();
      if (event.sources.length) answer.append(sourceList(event.sources));
      if (event.memories && event.memories.length) answer.append(rememberedNote(event.memories));
      if (event.model) answer.append(modelNote(event.model));
      if (event.left_out_notice) answer.append(leftOutNote(event.left_out_notice));
      showNewest();
      finish("");
    } else if (event.type === "error") {
      answer.className = "msg error";
      searching.remove();
      written = "";  // a drawing still pending must not bring the partial answer back
      text.textContent = event.message;
      showNewest();
      finish("");
    } else if (event.type === "idle") {
      answer.remove();
      finish("");
      openConversation(id);
    }
  };
  source.onerror = () => {
    if (state.source !== source) return;
    answer.remove();
    finish("Se ha perdido la conexión con Enlace. Recarga la página para ver la respuesta.");
  };
}

function armWatchdog() {
  clearTimeout(state.watchdog);
  const seconds = state.me ? state.me.stall_timeout_s : 60;
  state.watchdog = setTimeout(() => {
    finish("El asistente no responde. Inténtalo de nuevo dentro de un rato.");
  }, seconds * 1000);
}

function stopFollowing() {
  clearTimeout(state.watchdog);
  if (state.source) state.source.close();
  state.source = null;
}

function finish(message) {
  stopFollowing();
  setBusy(false);
  setStatus(message);
}

function setBusy(busy) {
  $("send").disabled = busy;
}

function setStatus(message) {
  $("status").textContent = message;
}

// ------------------------------------------------------------------ «Lo que Enlace recuerda»
// The person's memories and the household's: edit in place, forget one, forget all (typing
// BORRAR), pause. Texts go in with textContent, like everything else.
const FORGET_ALL_WORD = "BORRAR";
const SAVED = "Recuerdo guardado.";
const ALREADY_KEPT = "Enlace ya lo recordaba.";
const FORGOTTEN = "Recuerdo olvidado.";

async function openMemory() {
  $("side").classList.remove("open");
  $("chat").hidden = true;
  $("shopping").hidden = true;
  $("memory").hidden = false;
  memoryStatus("");
  await loadMemories();
  $("memory-title").focus();
}

function closeMemory() {  // and the shopping list: back to the conversation
  $("memory").hidden = true;
  $("shopping").hidden = true;
  $("chat").hidden = false;
}

function memoryStatus(message) {
  $("memory-status").textContent = message;
}

// A page of memories at a time (memory.page_memories): the first one replaces the lists, «Ver
// más recuerdos» appends the next one (`after`: the list's `next`).
let memoryNext = null;

// Only the newest whole load draws the lists (and says its change): two changes in a row can
// get their lists back in the other order, and the older must not cover the newer; «Ver más»
// adds its page only if no whole load started since. False: a newer load has taken over.
let memoryLoads = 0;
async function loadMemories(after) {
  const ticket = after ? memoryLoads : ++memoryLoads;
  let data;
  try {
    data = await api("/api/memories" + (after ? "?after=" + encodeURIComponent(after) : ""));
  } catch (e) {
    if (ticket === memoryLoads) memoryStatus(e.message);
    return false;
  }
  if (ticket !== memoryLoads) return false;
  $("memory-pause").checked = data.paused;
  $("memory-paused").hidden = !data.paused;
  for (const control of $("memory-add").elements) control.disabled = data.paused;
  const mine = $("memory-mine");
  const family = $("memory-family");
  if (!after) {
    mine.replaceChildren();
    family.replaceChildren();
  }
  for (const empty of $("memory").querySelectorAll(".memories > .empty")) empty.remove();
  for (const m of data.memories) (m.scope === "familia" ? family : mine).append(memoryItem(m, data.paused));
  if (!mine.children.length) mine.append(el("li", "Todavía no hay ninguno.", "empty"));
  if (!family.children.length) family.append(el("li", "Todavía no hay ninguno.", "empty"));
  memoryNext = data.next || null;
  $("memory-more").hidden = !memoryNext;
  return true;
}

const SOURCE_ES = { page: "en la página", cli: "en la terminal", assistant: "en una conversación", import: "importado" };

function memoryItem(m, paused) {
  const item = el("li", null, "memory-item");
  item.dataset.id = m.id;
  const text = el("span", m.text, "memory-text");
  const when = new Date(m.created * 1000);
  const meta = el("small", m.author + " · " + WHEN.format(when) + " · " + (SOURCE_ES[m.source] || m.source), "meta");
  if (m.changed_by) meta.append(" · cambiado por " + m.changed_by + " " + WHEN.format(new Date(m.updated * 1000)));
  if (m.conversation_title) {
    const from = el("a", "«" + m.conversation_title + "»");
    from.href = "#" + encodeURIComponent(m.conversation_id);
    from.addEventListener("click", (event) => { event.preventDefault(); openConversation(m.conversation_id); });
    meta.append(" · de ", from);
  }
  const edit = iconButton("✎", "Corregir «" + m.text + "»");
  edit.disabled = paused;
  const remove = iconButton("✕", "Olvidar «" + m.text + "»");
  item.append(text, edit, remove, meta);
  edit.addEventListener("click", () => editMemory(item, m));
  remove.addEventListener("click", () => askForget(item, m));
  return item;
}

function editMemory(item, m) {
  inlineEdit(item, "Corregir el recuerdo", m.text, () => item.replaceWith(memoryItem(m, false)), async (text) => {
    try {
      await api("/api/memories/" + m.id, { text }, "PATCH");
      if (await loadMemories()) memoryStatus("Recuerdo corregido.");
    } catch (e) {
      memoryStatus(e.message);
    }
  });
}

function askForget(item, m) {
  const restore = () => item.replaceWith(memoryItem(m, $("memory-pause").checked));
  inlineConfirm(item, "¿Olvidar «" + m.text + "»? No se puede deshacer.", "Sí, olvidar", restore, async () => {
    let said = FORGOTTEN;
    try {
      await api("/api/memories/" + m.id, {}, "DELETE");
    } catch (e) {
      said = e.message;
    }
    if (await loadMemories()) memoryStatus(said);
  });
}

$("memory-open").addEventListener("click", () => openMemory());
$("memory-more").addEventListener("click", () => loadMemories(memoryNext));
$("memory-close").addEventListener("click", () => { closeMemory(); $("text").focus(); });

$("memory-pause").addEventListener("change", async () => {
  const paused = $("memory-pause").checked;
  let said = paused ? "Memoria en pausa." : "Memoria reanudada.";
  try {
    await api("/api/memories/pause", { paused });
  } catch (e) {
    said = e.message;
  }
  if (await loadMemories()) memoryStatus(said);
});

$("memory-add").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const { new: added } = await api("/api/memories", { text: $("memory-text").value, scope: $("memory-scope").value });
    $("memory-text").value = "";
    $("memory-scope").value = "personal";  // the next one is the person's own unless chosen again
    if (await loadMemories()) memoryStatus(added ? SAVED : ALREADY_KEPT);
  } catch (e) {
    memoryStatus(e.message);
  }
});

$("memory-forget-all-open").addEventListener("click", () => {
  const box = $("memory-forget-all");
  const form = el("form", null, "confirm");
  const label = el("label", "Se olvidarán todos tus recuerdos (los de la familia se quedan). Escribe " + FORGET_ALL_WORD + " para confirmar:");
  const input = el("input");
  input.id = "memory-forget-all-word";
  input.autocomplete = "off";
  label.append(input);
  const yes = el("button", "Borrar todos", "danger");
  yes.type = "submit";
  yes.disabled = true;
  const no = el("button", "Cancelar", "ghost");
  no.type = "button";
  form.append(label, yes, no);
  const opener = $("memory-forget-all-open");
  box.replaceChildren(form);
  const back = () => box.replaceChildren(opener);
  input.addEventListener("input", () => { yes.disabled = input.value.trim() !== FORGET_ALL_WORD; });
  no.addEventListener("click", back);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let said;
    try {
      const { deleted } = await api("/api/memories/forget-all", { confirm: input.value.trim() });
      said = "Olvidados " + deleted + " recuerdos.";
      back();
    } catch (e) {
      said = e.message;
    }
    if (await loadMemories()) memoryStatus(said);
  });
  input.focus();
});

start();

// ------------------------------------------------------------------ the shopping list
// The household's list: the same for everyone of the family. Tick what is bought, clear it.
async function openShopping() {
  $("side").classList.remove("open");
  $("chat").hidden = true;
  $("memory").hidden = true;
  $("shopping").hidden = false;
  shoppingStatus("");
  await loadShopping();
  $("shopping-title").focus();
}

function shoppingStatus(message) {
  $("shopping-status").textContent = message;
}

// Only the newest load draws the list (and says its change): two changes in a row can get their
// lists back in the other order, and the older one must not cover the newer. False: a newer
// load has taken over.
let shoppingLoads = 0;
async function loadShopping() {
  const ticket = ++shoppingLoads;
  let data;
  try {
    data = await api("/api/shopping");
  } catch (e) {
    if (ticket === shoppingLoads) shoppingStatus(e.message);
    return false;
  }
  if (ticket !== shoppingLoads) return false;
  const list = $("shopping-items");
  list.replaceChildren(...data.items.map(shoppingItem));
  if (!data.items.length) list.append(el("li", "La lista está vacía.", "empty"));
  $("shopping-clear").disabled = !data.items.some((i) => i.done);
  return true;
}

function shoppingItem(i) {
  const item = el("li", null, "memory-item shopping-item" + (i.done ? " done" : ""));
  item.dataset.id = i.id;
  const label = el("label");
  const box = el("input");
  box.type = "checkbox";
  box.checked = i.done;
  label.append(box, " ", el("span", i.item, "memory-text"));
  item.append(label, el("small", i.added_by, "meta"));
  box.addEventListener("change", async () => {
    try {
      await api("/api/shopping/" + i.id, { done: box.checked }, "PATCH");
    } catch (e) {
      shoppingStatus(e.message);
    }
    await loadShopping();
  });
  return item;
}

$("shopping-open").addEventListener("click", () => openShopping());
$("shopping-close").addEventListener("click", () => { closeMemory(); $("text").focus(); });

// Each change is said once the list shows it (as «Lo que Enlace recuerda» does): a status read
// before the list came back described a list still showing what had been cleared.
$("shopping-add").addEventListener("submit", async (event) => {
  event.preventDefault();
  let said;
  try {
    const { new: added, item } = await api("/api/shopping", { text: $("shopping-text").value });
    $("shopping-text").value = "";
    said = added ? "Añadido: " + item.item + "." : item.item + " ya estaba en la lista.";
  } catch (e) {
    said = e.message;
  }
  if (await loadShopping()) shoppingStatus(said);
});

$("shopping-clear").addEventListener("click", async () => {
  let said;
  try {
    const { removed } = await api("/api/shopping/clear", {});
    said = removed === 1 ? "Quitado 1 artículo comprado." : "Quitados " + removed + " artículos comprados.";
  } catch (e) {
    said = e.message;
  }
  if (await loadShopping()) shoppingStatus(said);
});

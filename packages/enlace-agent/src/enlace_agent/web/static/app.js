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

async function api(path, body) {
  const options = { headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.method = "POST";
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
  for (const c of conversations) {
    const link = el("a", c.title);
    link.href = "#" + encodeURIComponent(c.id);
    if (c.id === state.current) link.className = "current";
    link.addEventListener("click", (event) => {
      event.preventDefault();
      $("side").classList.remove("open");
      openConversation(c.id);
    });
    const item = el("li");
    item.append(link);
    list.append(item);
  }
}

function newConversation() {
  stopFollowing();
  state.current = null;
  history.replaceState(null, "", location.pathname);
  $("messages").replaceChildren();
  setStatus("");
  setBusy(false);
  $("text").focus();
}

async function openConversation(id) {
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
  for (const m of data.messages) addMessage(m.role, m.content, m.sources);
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
function addMessage(role, text, sources) {
  const item = el("li", null, "msg " + role);
  const body = el("div", text, "text");
  item.append(body);
  if (sources && sources.length) item.append(sourceList(sources));
  $("messages").append(item);
  item.scrollIntoView({ block: "end" });
  return item;
}

function sourceList(sources) {
  const list = el("ol", null, "sources");
  list.setAttribute("aria-label", "Fuentes");
  for (const s of sources) {
    const item = el("li");
    let url = null;
    try { url = new URL(s.url); } catch (e) { url = null; }
    if (url && (url.protocol === "https:" || url.protocol === "http:")) {
      const link = el("a", s.title || url.href);
      link.href = url.href;
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      item.append(link);
    } else {
      item.append(el("span", s.title || ""));
    }
    if (s.provider) item.append(el("span", " (vía " + s.provider + ")", "provider"));
    list.append(item);
  }
  return list;
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

// ------------------------------------------------------------------ following an answer
function follow(id) {
  stopFollowing();
  setBusy(true);
  setStatus("Enlace está pensando…");
  const answer = addMessage("assistant", "");
  const text = answer.querySelector(".text");
  const searching = el("div", null, "searching");
  answer.prepend(searching);
  const source = new EventSource("/api/conversations/" + encodeURIComponent(id) + "/events");
  state.source = source;
  armWatchdog();
  source.onmessage = (message) => {
    armWatchdog();
    const event = JSON.parse(message.data);
    if (event.type === "text") {
      text.textContent += event.text;
      setStatus("Enlace está escribiendo…");
    } else if (event.type === "tool_call") {
      searching.textContent = "Buscando en internet…";
    } else if (event.type === "tool_result") {
      searching.textContent = event.ok ? "" : "La búsqueda ha fallado.";
    } else if (event.type === "end") {
      text.textContent = event.text;
      searching.remove();
      if (event.sources.length) answer.append(sourceList(event.sources));
      finish("");
    } else if (event.type === "error") {
      answer.className = "msg error";
      searching.remove();
      text.textContent = event.message;
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

start();

// Gives the browser its session cookie under `auth: local`, or takes it back. Each data the server sends
// acts once in the page (the component is drawn on every run).
//
// Served by workbench/ui/serve.py (data.endpoint): the page posts the one-time code (or, to end, the
// cookie's name) and the server's answer sets or clears the cookie, HttpOnly: no script in the page can read
// the token. Otherwise the component sets an ordinary cookie itself. SameSite=Strict either way: never sent
// by a request that another site starts. The server reads it back through st.context.cookies.
const done = new Set();

export default function (component) {
  const { name, action, endpoint, code, value, maxAge, nonce } = component.data || {};
  const { setTriggerValue } = component;
  if (!name || !action) return;
  const once = action + ":" + (code || nonce);
  if (done.has(once)) return;
  done.add(once);
  if (endpoint) {
    // a sign-in's page waits for this answer: the app opens only once the browser holds the cookie, so a
    // reload at any moment after that keeps the session (issue 32 item 8)
    const told = (ok, status) => { if (action === "start" && setTriggerValue) setTriggerValue("stored", { code, ok, status }); };
    fetch(endpoint + (action === "end" ? "/end" : ""), {
      method: "POST", credentials: "same-origin", headers: { "X-Workbench": "session" },
      body: action === "end" ? name : code,
    }).then((r) => told(r.ok, r.status), () => told(false, 0));
    return;
  }
  const secure = window.location.protocol === "https:" ? "; Secure" : "";
  document.cookie = action === "start" && value
    ? `${name}=${value}; Path=/; Max-Age=${maxAge}; SameSite=Strict${secure}`
    : `${name}=; Path=/; Max-Age=0; SameSite=Strict${secure}`;
}

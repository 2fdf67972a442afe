// Sets or clears the browser-session cookie of `auth: local` (SameSite=Strict: never sent by a
// request that another site starts). The server reads it back through st.context.cookies.
export default function (component) {
  const { name, value, maxAge } = component.data || {};
  if (!name) return;
  const secure = window.location.protocol === "https:" ? "; Secure" : "";
  document.cookie = value
    ? `${name}=${value}; Path=/; Max-Age=${maxAge}; SameSite=Strict${secure}`
    : `${name}=; Path=/; Max-Age=0; SameSite=Strict${secure}`;
}

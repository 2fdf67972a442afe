// Remembers, per browser tab (sessionStorage), which user this tab was signed in as. A tab reloaded after
// another tab of the same browser signed in as someone else resumes with that cookie: the tab changes user,
// and the app must say so (issue 32 item 7). Only a resumed session is compared: a sign-in typed in this tab
// is no surprise.
export default function (component) {
  const { user, resumed, study } = component.data || {};
  const { setTriggerValue } = component;
  if (!user || !study) return;
  const key = "wb.tab.user." + study;
  let before = null;
  try {
    before = window.sessionStorage.getItem(key);
    window.sessionStorage.setItem(key, user);
  } catch (e) {
    return; // storage refused (a locked-down browser): nothing to compare with
  }
  if (resumed && before && before !== user && setTriggerValue) setTriggerValue("changed", { from: before, to: user });
}

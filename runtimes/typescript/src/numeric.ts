/** numpy.round(v, digits): round half to even, as NumPy rounds (Math.round rounds half up). */
export function roundHalfEven(v: number, digits: number): number {
  const scale = 10 ** digits;
  const scaled = v * scale;
  let r = Math.round(scaled);
  if (Math.abs(scaled % 1) === 0.5 && r % 2 !== 0) r -= 1;
  return r / scale;
}
